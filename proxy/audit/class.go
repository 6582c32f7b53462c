package audit

// An AnswerClass is the class of an origin's own answer to a request
// robotsgate forwarded, as the metrics, the status page and the report
// count them: 429 apart from the other 4xx, since it asks for a pause.
type AnswerClass uint8

// The answer classes.
const (
	Answer1xx AnswerClass = iota // 101 to a WebSocket
	Answer2xx
	Answer3xx
	Answer4xx
	Answer429
	Answer5xx
	NumAnswerClasses = int(Answer5xx) + 1
)

var answerClassNames = [NumAnswerClasses]string{"1xx", "2xx", "3xx", "4xx", "429", "5xx"}

// String returns the class's name: "2xx", "429"…
func (c AnswerClass) String() string {
	if int(c) < NumAnswerClasses {
		return answerClassNames[c]
	}
	return "other"
}

// ClassOf returns the class of an HTTP status; false when it is none
// (below 100, or 600 and above).
func ClassOf(status int) (AnswerClass, bool) {
	switch {
	case status == 429:
		return Answer429, true
	case status >= 100 && status < 500:
		return AnswerClass(status/100 - 1), true
	case status >= 500 && status < 600:
		return Answer5xx, true
	}
	return 0, false
}
