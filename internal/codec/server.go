package codec

import (
	"net/http"
	"slices"

	"go.temporal.io/sdk/converter"
)

// Handler serves the codec to the Temporal Web UI and the temporal CLI (POST .../encode and .../decode, the
// SDK's remote codec protocol), answering browsers only from the given origins (CORS).
func Handler(c *Codec, origins []string) http.Handler {
	codec := converter.NewPayloadCodecHTTPHandler(c)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" {
			if !slices.Contains(origins, origin) {
				http.Error(w, "origin "+origin+" is not allowed: start the codec server with --cors-origin "+origin, http.StatusForbidden)
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Credentials", "true")
			h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions {
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		codec.ServeHTTP(w, r)
	})
}
