package audit

import "testing"

func TestClassOf(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]string{101: "1xx", 200: "2xx", 204: "2xx", 301: "3xx", 304: "3xx", 400: "4xx", 404: "4xx",
		428: "4xx", 429: "429", 430: "4xx", 499: "4xx", 500: "5xx", 503: "5xx", 599: "5xx"} {
		if c, ok := ClassOf(status); !ok || c.String() != want {
			t.Errorf("ClassOf(%d) = %v, %v; want %s", status, c, ok, want)
		}
	}
	for _, status := range []int{0, 99, 600, 999, -1} {
		if c, ok := ClassOf(status); ok {
			t.Errorf("ClassOf(%d) = %v; want none", status, c)
		}
	}
}
