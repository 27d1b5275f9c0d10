package lines

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLastDrawing(t *testing.T) {
	assert.Equal(t, "100%|##########| 500/500", LastDrawing("\r  0%|          | 0/500\r 50%|#####     | 250/500\r100%|##########| 500/500"))
	assert.Equal(t, "done", LastDrawing("done\r"), "a bar drawn as text then a carriage return")
	assert.Equal(t, "windows line", LastDrawing("windows line\r"), "a CRLF line end")
	assert.Equal(t, "plain line", LastDrawing("plain line"))
	assert.Equal(t, "", LastDrawing(""))
}

func TestDrawing(t *testing.T) {
	assert.Equal(t, "", Drawing([]byte("loading..."), 256), "a part line that is not redrawn is no drawing")
	assert.Equal(t, " 45%|####      | 225/500", Drawing([]byte("\r  0%|          | 0/500\r 45%|####      | 225/500  "), 256),
		"the latest drawing, its padding on the right dropped")
	assert.Equal(t, "epoch 3 42%", Drawing([]byte("\r\x1b[32mepoch 3\x1b[0m 42%\x07\xff"), 256), "colours, bells and bad bytes go")
	assert.Equal(t, "", Drawing([]byte("\r   \r"), 256))
	assert.Equal(t, "ééé", Drawing([]byte("\réééé"), 7), "cut at a character's start")
	long := "\r" + strings.Repeat("x", 10000) + "\r" + "step 9"
	assert.Equal(t, "step 9", Drawing([]byte(long), 256))
	assert.Equal(t, "", Drawing([]byte("\r"+strings.Repeat("x", 10000)), 256), "a drawing past the window is no progress bar")
}

func TestUnfinished(t *testing.T) {
	assert.Equal(t, "Loading data...", Unfinished([]byte("Loading data..."), 256), "a part line that is not redrawn, as it is")
	assert.Equal(t, " 45%|####", Unfinished([]byte("\r  0%|\r 45%|####  "), 256), "a redrawn one, as Drawing gives it")
	assert.Equal(t, "", Unfinished([]byte("   \x1b[0m"), 256), "blank")
	assert.Equal(t, strings.Repeat(".", 256), Unfinished([]byte(strings.Repeat(".", 10000)), 256), "cut to max")
}

func TestPlain(t *testing.T) {
	for in, want := range map[string]string{
		"\x1b[31mred\x1b[0m plain":                   "red plain",
		"title \x1b]0;pwned\x07set":                  "title set",
		"title \x1b]0;pwned\x1b\\set":                "title set",
		"link \x1b]8;;http://x\x1b\\x\x1b]8;;\x1b\\": "link x",
		"err \x1b[2J\x1b[Hcleared":                   "err cleared",
		"bin:\x01\x02\xff\xfe end":                   "bin: end",
		"a\tb":                                       "a b",
		"c1 \u009b31m":                               "c1 31m",
		"caf\u00e9 ok":                               "caf\u00e9 ok",
		"cut \x1b]0;never ended":                     "cut ",
	} {
		assert.Equal(t, want, Plain(in), "%q", in)
	}
}
