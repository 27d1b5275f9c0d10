package spec

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDays(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "0": 0, "0d": 0, "12h": 12 * time.Hour, "90m": 90 * time.Minute, "3s": 3 * time.Second} {
		got, err := ParseDays(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]string{
		"3x":   `"3x" is not a duration: give days (30d) or hours, minutes or seconds (12h, 90m)`,
		"1.5d": `"1.5d" is not a number of days from 0 to 36500 (as 30d)`,
		"-1d":  `"-1d" is not a number of days from 0 to 36500 (as 30d)`,
		"-5m":  `"-5m" is negative`,
	} {
		_, err := ParseDays(in)
		assert.EqualError(t, err, want, in)
	}
	assert.Equal(t, "30d", FormatDays(30*24*time.Hour))
	assert.Equal(t, "3s", FormatDays(3*time.Second))
	assert.Equal(t, "36h", FormatDays(36*time.Hour))
	assert.Equal(t, "1h30m", FormatDays(90*time.Minute))
	assert.Equal(t, "1m30s", FormatDays(90*time.Second))
	assert.Equal(t, "10m", FormatDays(10*time.Minute))
}
