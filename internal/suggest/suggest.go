// Package suggest finds the nearest of a set of names to a mistyped one,
// for "did you mean" hints in the command line and configuration errors.
package suggest

// Nearest returns the candidate with the smallest edit distance to name, or
// "" when none is close enough to be a plausible typo: at most a third of
// name's length, and at least 1, edits away. Ties go to the earlier
// candidate.
func Nearest(name string, candidates []string) string {
	limit := max(1, len([]rune(name))/3)
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if d := distance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, counted in runes.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
