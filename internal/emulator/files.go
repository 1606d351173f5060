package emulator

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// fileTTL is how long uploaded files live, as on the real API.
const fileTTL = 48 * time.Hour

// maxFileBytes is the largest file the Files API accepts.
const maxFileBytes = 2 << 30

type storedFile struct {
	id, keyID, displayName, mime string
	data                         []byte
	created, expire              time.Time
}

type uploadSession struct {
	keyID, id, displayName, mime string
	declared                     int64
	buf                          []byte
	version                      string
}

var fileIDRE = regexp.MustCompile(`^[a-z0-9-]{1,40}$`)

func errFileNotFound(id string) *apiError {
	return newError(403, fmt.Sprintf("You do not have permission to access the File %s or it may not exist.", id))
}

// upload serves POST /upload/{v}/files: the resumable start, and the chunk
// uploads addressed by upload_id (which authorises them, as on the real API).
func (s *Server) upload(c *call) {
	if id := c.r.URL.Query().Get("upload_id"); id != "" {
		s.uploadChunk(c, id)
		return
	}
	if !s.auth(c) {
		return
	}
	if p := c.r.Header.Get("X-Goog-Upload-Protocol"); p != "resumable" {
		writeError(c.w, c.r, errInvalid(fmt.Sprintf("Unsupported upload protocol %q; only resumable uploads are supported by the emulator.", p)), modeUnary)
		return
	}
	if cmd := strings.ToLower(strings.TrimSpace(c.r.Header.Get("X-Goog-Upload-Command"))); cmd != "start" {
		writeError(c.w, c.r, errInvalid(fmt.Sprintf("Invalid X-Goog-Upload-Command %q for a new upload; want \"start\".", cmd)), modeUnary)
		return
	}
	_, v, e := readBody(c)
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	norm, e := s.validator(c).message(v, msgCreateFile, "")
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	file, _ := norm["file"].(map[string]any)
	u := &uploadSession{keyID: c.keyID, version: c.version}
	u.displayName, _ = file["displayName"].(string)
	u.mime, _ = file["mimeType"].(string)
	if h := c.r.Header.Get("X-Goog-Upload-Header-Content-Type"); h != "" {
		u.mime = h
	}
	if u.mime == "" {
		writeError(c.w, c.r, errInvalid("* CreateFileRequest.file.mime_type: mime_type is required\n"), modeUnary)
		return
	}
	u.declared = -1
	if h := c.r.Header.Get("X-Goog-Upload-Header-Content-Length"); h != "" {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil || n < 0 || n > maxFileBytes {
			writeError(c.w, c.r, errInvalid(fmt.Sprintf("Invalid X-Goog-Upload-Header-Content-Length %q.", h)), modeUnary)
			return
		}
		u.declared = n
	}
	if name, ok := file["name"].(string); ok && name != "" {
		u.id = strings.TrimPrefix(name, "files/")
		if !fileIDRE.MatchString(u.id) {
			writeError(c.w, c.r, errInvalid(fmt.Sprintf("* CreateFileRequest.file.name: invalid file name %q\n", name)), modeUnary)
			return
		}
		if _, exists := s.getFile(c.keyID, u.id); exists {
			writeError(c.w, c.r, newError(409, fmt.Sprintf("File %s already exists.", name)), modeUnary)
			return
		}
	} else {
		u.id = s.nextID("file", 12)
	}
	uploadID := s.nextID("upload", 32)
	s.mu.Lock()
	s.uploads[uploadID] = u
	s.mu.Unlock()
	loc := url.URL{Scheme: "http", Host: c.r.Host, Path: "/upload/v1beta/files",
		RawQuery: "upload_id=" + uploadID + "&upload_protocol=resumable"}
	h := c.w.Header()
	h.Set("X-Goog-Upload-Url", loc.String())
	h.Set("X-Goog-Upload-Control-Url", loc.String())
	h.Set("X-Goog-Upload-Status", "active")
	h.Set("X-Goog-Upload-Chunk-Granularity", "8388608")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	c.w.WriteHeader(http.StatusOK)
}

func (s *Server) uploadChunk(c *call, uploadID string) {
	s.mu.Lock()
	u := s.uploads[uploadID]
	s.mu.Unlock()
	if u == nil {
		writeError(c.w, c.r, newError(404, "Upload session not found or already finalized."), modeUnary)
		return
	}
	cmd := map[string]bool{}
	for _, p := range strings.Split(strings.ToLower(c.r.Header.Get("X-Goog-Upload-Command")), ",") {
		cmd[strings.TrimSpace(p)] = true
	}
	if cmd["query"] {
		c.w.Header().Set("X-Goog-Upload-Status", "active")
		c.w.Header().Set("X-Goog-Upload-Size-Received", strconv.Itoa(len(u.buf)))
		c.w.WriteHeader(http.StatusOK)
		return
	}
	if !cmd["upload"] && !cmd["finalize"] {
		writeError(c.w, c.r, errInvalid(fmt.Sprintf("Invalid X-Goog-Upload-Command %q.", c.r.Header.Get("X-Goog-Upload-Command"))), modeUnary)
		return
	}
	off, err := strconv.ParseInt(c.r.Header.Get("X-Goog-Upload-Offset"), 10, 64)
	body, rerr := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, MaxBodyBytes))
	if rerr != nil {
		writeError(c.w, c.r, newError(413, fmt.Sprintf("Request payload size exceeds the limit: %d bytes.", MaxBodyBytes)), modeUnary)
		return
	}
	s.mu.Lock()
	if err != nil || off != int64(len(u.buf)) {
		got := len(u.buf)
		s.mu.Unlock()
		c.w.Header().Set("X-Goog-Upload-Status", "active")
		writeError(c.w, c.r, errInvalid(fmt.Sprintf("Invalid X-Goog-Upload-Offset %q; the server has received %d bytes.", c.r.Header.Get("X-Goog-Upload-Offset"), got)), modeUnary)
		return
	}
	if len(u.buf)+len(body) > maxFileBytes {
		s.mu.Unlock()
		writeError(c.w, c.r, newError(413, "File exceeds the 2 GB limit."), modeUnary)
		return
	}
	u.buf = append(u.buf, body...)
	if !cmd["finalize"] {
		s.mu.Unlock()
		c.w.Header().Set("X-Goog-Upload-Status", "active")
		c.w.WriteHeader(http.StatusOK)
		return
	}
	if u.declared >= 0 && int64(len(u.buf)) != u.declared {
		s.mu.Unlock()
		c.w.Header().Set("X-Goog-Upload-Status", "active")
		writeError(c.w, c.r, errInvalid(fmt.Sprintf("Uploaded %d bytes but X-Goog-Upload-Header-Content-Length declared %d.", len(u.buf), u.declared)), modeUnary)
		return
	}
	delete(s.uploads, uploadID)
	now := s.now()
	f := &storedFile{id: u.id, keyID: u.keyID, displayName: u.displayName, mime: u.mime, data: u.buf,
		created: now, expire: now.Add(fileTTL)}
	s.files[f.id] = f
	s.mu.Unlock()
	c.w.Header().Set("X-Goog-Upload-Status", "final")
	b, _ := marshalIndent(map[string]any{"file": s.fileJSON(f)})
	writeJSON(c.w, c.r, 200, append(b, '\n'))
}

// routeFiles serves {v}/files[/{id}].
func (s *Server) routeFiles(c *call) {
	rest, m := c.rest, c.r.Method
	switch {
	case len(rest) == 1 && m == http.MethodGet:
		s.listFiles(c)
	case len(rest) == 2 && (m == http.MethodGet || m == http.MethodDelete) && !strings.Contains(rest[1], ":"):
		f, ok := s.getFile(c.keyID, rest[1])
		if !ok {
			writeError(c.w, c.r, errFileNotFound(rest[1]), modeUnary)
			return
		}
		if m == http.MethodDelete {
			s.mu.Lock()
			delete(s.files, f.id)
			s.mu.Unlock()
			writeJSON(c.w, c.r, 200, []byte("{}\n"))
			return
		}
		b, _ := marshalIndent(s.fileJSON(f))
		writeJSON(c.w, c.r, 200, append(b, '\n'))
	default:
		writeError(c.w, c.r, errMethodNotFound(), modeUnary)
	}
}

func (s *Server) listFiles(c *call) {
	now := s.now()
	s.mu.Lock()
	var all []*storedFile
	for _, f := range s.files {
		if f.keyID == c.keyID && now.Before(f.expire) {
			all = append(all, f)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b *storedFile) int {
		if d := b.created.Compare(a.created); d != 0 {
			return d
		}
		return strings.Compare(a.id, b.id)
	})
	writeList(c, "files", all, 10, 100, s.fileJSON)
}

// getFile returns the caller's live file id.
func (s *Server) getFile(keyID, id string) (*storedFile, bool) {
	id = strings.TrimPrefix(id, "files/")
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[id]
	if f == nil || f.keyID != keyID {
		return nil, false
	}
	if !s.now().Before(f.expire) {
		delete(s.files, id)
		return nil, false
	}
	return f, true
}

// fileIDFromURI extracts the id from a Files API URI
// ("https://generativelanguage.googleapis.com/v1beta/files/abc", "files/abc").
func fileIDFromURI(uri string) (string, bool) {
	if id, ok := strings.CutPrefix(uri, "files/"); ok {
		return id, true
	}
	u, err := url.Parse(uri)
	if err != nil {
		return "", false
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(segs) >= 3 && segs[len(segs)-2] == "files" && versions[segs[len(segs)-3]] {
		return segs[len(segs)-1], true
	}
	return "", false
}

// fileText returns a text file's content for token counting.
func (s *Server) fileText(keyID, uri string) (string, string, bool) {
	id, ok := fileIDFromURI(uri)
	if !ok {
		return "", "", false
	}
	f, ok := s.getFile(keyID, id)
	if !ok {
		return "", "", false
	}
	return string(f.data), f.mime, true
}

func (s *Server) fileJSON(f *storedFile) any {
	sum := sha256.Sum256(f.data)
	type out struct {
		Name           string `json:"name"`
		DisplayName    string `json:"displayName,omitempty"`
		MIMEType       string `json:"mimeType"`
		SizeBytes      string `json:"sizeBytes"`
		CreateTime     string `json:"createTime"`
		UpdateTime     string `json:"updateTime"`
		ExpirationTime string `json:"expirationTime"`
		SHA256Hash     string `json:"sha256Hash"`
		URI            string `json:"uri"`
		State          string `json:"state"`
		Source         string `json:"source"`
	}
	return out{"files/" + f.id, f.displayName, f.mime, strconv.Itoa(len(f.data)), s.timestamp(f.created),
		s.timestamp(f.created), s.timestamp(f.expire),
		base64.StdEncoding.EncodeToString([]byte(hex.EncodeToString(sum[:]))),
		"https://generativelanguage.googleapis.com/v1beta/files/" + f.id, "ACTIVE", "UPLOADED"}
}
