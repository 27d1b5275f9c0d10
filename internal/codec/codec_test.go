package codec

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

func keyFile(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return p
}

func newKey(t *testing.T, id string) string {
	l, err := NewKeyLine(id)
	require.NoError(t, err)
	return l
}

func TestCodec_RoundTripAndRotation(t *testing.T) {
	old := newKey(t, "k1")
	c1, err := Load(keyFile(t, "# first key", old))
	require.NoError(t, err)
	dc1 := c1.DataConverter()
	p, err := dc1.ToPayload(map[string]string{"HF_TOKEN": "hf_secret_value"})
	require.NoError(t, err)
	assert.Equal(t, Encoding, string(p.Metadata[converter.MetadataEncoding]))
	assert.Equal(t, "k1", string(p.Metadata[MetadataKeyID]))
	assert.NotContains(t, string(p.Data), "hf_secret_value")

	// Rotated: a new first key encrypts; the old one still decrypts what it wrote.
	c2, err := Load(keyFile(t, newKey(t, "k2"), old))
	require.NoError(t, err)
	var got map[string]string
	require.NoError(t, c2.DataConverter().FromPayload(p, &got))
	assert.Equal(t, "hf_secret_value", got["HF_TOKEN"])
	p2, err := c2.DataConverter().ToPayload("x")
	require.NoError(t, err)
	assert.Equal(t, "k2", string(p2.Metadata[MetadataKeyID]))

	// Without the key: a clear error naming it.
	c3, err := Load(keyFile(t, newKey(t, "k3")))
	require.NoError(t, err)
	err = c3.DataConverter().FromPayload(p, &got)
	assert.ErrorContains(t, err, `payload encrypted with key "k1", which the codec key file does not hold`)

	// Plain payloads (written before encryption was on) pass through.
	plain, err := converter.GetDefaultDataConverter().ToPayload("plain")
	require.NoError(t, err)
	var s string
	require.NoError(t, c2.DataConverter().FromPayload(plain, &s))
	assert.Equal(t, "plain", s)

	// Tampering is caught.
	bad := &commonpb.Payload{Metadata: p.Metadata, Data: append([]byte(nil), p.Data...)}
	bad.Data[len(bad.Data)-1] ^= 1
	assert.Error(t, c1.DataConverter().FromPayload(bad, &got))
}

func TestCodec_KeyFileProblems(t *testing.T) {
	p := keyFile(t, newKey(t, "k1"))
	require.NoError(t, os.Chmod(p, 0o644))
	_, err := Load(p)
	assert.ErrorContains(t, err, "can be read by other users (mode -rw-r--r--): chmod 600")
	for _, tc := range []struct{ doc, want string }{
		{"", "no key in it"},
		{"k1 c2hvcnQ=", "not 32 bytes"},
		{"k/1 " + strings.Repeat("A", 44), "key ID"},
		{"k1", `want "ID BASE64-KEY"`},
		{newKey(t, "k1") + "\n" + newKey(t, "k1"), "appears twice"},
	} {
		_, err := Parse([]byte(tc.doc))
		assert.ErrorContains(t, err, tc.want, tc.doc)
	}
}

func TestHandler_DecodesForTheWebUI(t *testing.T) {
	c, err := Parse([]byte(newKey(t, "k1")))
	require.NoError(t, err)
	p, err := c.DataConverter().ToPayload("secret")
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(c, []string{"http://localhost:8233"}))
	defer srv.Close()

	remote := converter.NewRemoteDataConverter(converter.GetDefaultDataConverter(), converter.RemoteDataConverterOptions{Endpoint: srv.URL})
	var s string
	require.NoError(t, remote.FromPayload(p, &s))
	assert.Equal(t, "secret", s)

	pre, _ := http.NewRequest(http.MethodOptions, srv.URL+"/decode", nil)
	pre.Header.Set("Origin", "http://localhost:8233")
	resp, err := http.DefaultClient.Do(pre)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, "http://localhost:8233", resp.Header.Get("Access-Control-Allow-Origin"))

	other, _ := http.NewRequest(http.MethodPost, srv.URL+"/decode", bytes.NewReader([]byte(`{"payloads": []}`)))
	other.Header.Set("Origin", "http://evil.example")
	resp, err = http.DefaultClient.Do(other)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}

// The cost of encrypting and decrypting one run spec sized payload (2 KiB).
func BenchmarkCodec_RoundTrip2KiB(b *testing.B) {
	line, _ := NewKeyLine("k1")
	c, _ := Parse([]byte(line))
	dc := c.DataConverter()
	in := map[string]string{"env": strings.Repeat("x", 2048)}
	for i := 0; i < b.N; i++ {
		p, err := dc.ToPayload(in)
		if err != nil {
			b.Fatal(err)
		}
		var out map[string]string
		if err := dc.FromPayload(p, &out); err != nil {
			b.Fatal(err)
		}
	}
}

func TestOrigin_IsWhatABrowserSends(t *testing.T) {
	for in, want := range map[string]string{
		"http://localhost:8233":  "http://localhost:8233",
		"http://localhost:8233/": "http://localhost:8233",
		"HTTPS://UI.Example.com": "https://ui.example.com",
		"https://[::1]:8233":     "https://[::1]:8233",
	} {
		got, err := Origin(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]string{
		"*":                                "any web page",
		"localhost:8233":                   "is not a browser origin",
		"ui.example.com":                   "is not a browser origin",
		"ftp://ui.example.com":             "is not a browser origin",
		"http://":                          "is not a browser origin",
		"http://localhost:8233/namespaces": "use http://localhost:8233",
		"http://localhost:8233/?x=1":       "use http://localhost:8233",
		"http://u:p@localhost:8233":        "more than scheme",
	} {
		_, err := Origin(in)
		assert.ErrorContains(t, err, want, in)
	}
}
