// Package lint holds repository-wide checks that run as ordinary tests, such
// as every package having a package doc comment.
package lint
