// Package codec encrypts clusterrun's payloads (run specs with their env, task inputs and results, heartbeats,
// signals, memos) with AES-256-GCM before they reach the Temporal server, through the SDK's codec data converter.
// Keys live in a key file on the machines that run workers and the CLI, never on the server:
//
//	# one key per line: ID BASE64-OF-32-BYTES; the first encrypts, every one decrypts
//	k2026-11 q2J0c3...=
//	k2026-10 9xYp...=
//
// Rotating a key is adding a new first line (everywhere), then dropping the old line once no open run needs it.
package codec

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

const (
	// EnvKeyFile names the key file for workers and the CLI (--codec-key-file wins).
	EnvKeyFile = "CLUSTERRUN_CODEC_KEY_FILE"
	// Encoding marks an encrypted payload; the original payload, serialized, is its plaintext.
	Encoding = "binary/encrypted"
	// MetadataKeyID names the key that encrypted a payload.
	MetadataKeyID = "encryption-key-id"
)

var keyIDRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`) }) // compiled at first use

// Codec is an AES-256-GCM payload codec with named keys.
type Codec struct {
	current string
	keys    map[string]cipher.AEAD
}

// Load reads a key file. It must not be readable by other users.
func Load(path string) (*Codec, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("codec key file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("codec key file %s can be read by other users (mode %v): chmod 600 %s", path, st.Mode().Perm(), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("codec key file: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("codec key file %s: %w", path, err)
	}
	return c, nil
}

// Parse reads keys, one "ID BASE64" per line; blank lines and lines starting with # are skipped.
func Parse(data []byte) (*Codec, error) {
	c := &Codec{keys: map[string]cipher.AEAD{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"ID BASE64-KEY\" (make one with: clusterrun codec-key ID)", n)
		}
		id := fields[0]
		if !keyIDRE().MatchString(id) {
			return nil, fmt.Errorf("line %d: key ID %q may hold letters, digits, '.', '_' and '-' (at most 64)", n, id)
		}
		if _, dup := c.keys[id]; dup {
			return nil, fmt.Errorf("line %d: key ID %q appears twice", n, id)
		}
		key, err := base64.StdEncoding.DecodeString(fields[1])
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("line %d: key %q is not 32 bytes in base64 (AES-256)", n, id)
		}
		aead, err := newAEAD(key)
		if err != nil {
			return nil, err
		}
		c.keys[id] = aead
		if c.current == "" {
			c.current = id
		}
	}
	if c.current == "" {
		return nil, errors.New("no key in it (make one with: clusterrun codec-key ID)")
	}
	return c, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// NewKeyLine makes a fresh key as a key file line.
func NewKeyLine(id string) (string, error) {
	if !keyIDRE().MatchString(id) {
		return "", fmt.Errorf("key ID %q may hold letters, digits, '.', '_' and '-' (at most 64)", id)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return id + " " + base64.StdEncoding.EncodeToString(key), nil
}

// KeyID is the ID of the key that encrypts.
func (c *Codec) KeyID() string { return c.current }

// Encode encrypts each payload with the current key; the key ID is bound to the ciphertext.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	aead := c.keys[c.current]
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := p.Marshal()
		if err != nil {
			return nil, fmt.Errorf("encrypt payload: %w", err)
		}
		nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return nil, err
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{converter.MetadataEncoding: []byte(Encoding), MetadataKeyID: []byte(c.current)},
			Data:     aead.Seal(nonce, nonce, plain, []byte(c.current)),
		}
	}
	return out, nil
}

// Decode decrypts encrypted payloads and passes others through (those written before encryption was on, or by
// a client without the codec).
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != Encoding {
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[MetadataKeyID])
		aead, ok := c.keys[id]
		if !ok {
			return nil, fmt.Errorf("payload encrypted with key %q, which the codec key file does not hold: add that key's line", id)
		}
		data := p.GetData()
		if len(data) < aead.NonceSize() {
			return nil, errors.New("encrypted payload is too short")
		}
		plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], []byte(id))
		if err != nil {
			return nil, fmt.Errorf("decrypt payload with key %q: %w", id, err)
		}
		var dec commonpb.Payload
		if err := dec.Unmarshal(plain); err != nil {
			return nil, fmt.Errorf("decrypted payload: %w", err)
		}
		out[i] = &dec
	}
	return out, nil
}

// DataConverter is the SDK's default converter with this codec under it.
func (c *Codec) DataConverter() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}
