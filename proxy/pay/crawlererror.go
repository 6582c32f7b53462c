package pay

// FieldError is the field a pay-per-crawl site names its error in
// (docs/identity.md, "crawler-error"): one code, as "PaymentFailed".
const FieldError = "Crawler-Error"

// InternalError is the one crawler-error code worth a retry: the site's
// own failure, not the request's.
const InternalError = "InternalError"

// maxErrorCode bounds what is read of a crawler-error field: Cloudflare's
// longest code is 24 bytes.
const maxErrorCode = 64

// errorCodes are the codes Cloudflare documents (its "Error codes" page of
// pay-per-crawl, April 2026), with what each says, in robotsgate's words.
var errorCodes = map[string]string{
	"CrawlerForbidden":         "the site owner blocks this crawler",
	"StrongAuthRequired":       "the site wants a Web Bot Auth signature it can verify",
	"InvalidSignature":         "the site did not find both Signature and Signature-Input",
	"InvalidCrawlerPriceValue": "a price offered does not read as one",
	"MissingCrawlerPrice":      "the site wants crawler-exact-price or crawler-max-price",
	"PaymentFailed":            "the payment did not go through on the site's side (the operator's pay-per-crawl account)",
	"InvalidCrawlerExactPrice": "crawler-exact-price is not the site's price",
	"InvalidCrawlerMaxPrice":   "crawler-max-price is below the site's price",
	"ConflictingPriceHeaders":  "the request offered both crawler-exact-price and crawler-max-price",
	"InvalidContentPrice":      "the site's origin set a price that does not read",
	InternalError:              "the site failed on its side",
}

// ParseError reads a crawler-error field's value: one code, ASCII letters
// and digits, at most 64 bytes, spaces around it ignored. It returns ""
// for a value that is not one (empty, too long, other bytes): such a
// field is not a code, and is not echoed. A code Cloudflare does not
// document is returned as it is: Describe says so.
func ParseError(v string) string {
	if len(v) > maxErrorCode+16 {
		return ""
	}
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	if v == "" || len(v) > maxErrorCode {
		return ""
	}
	for i := 0; i < len(v); i++ {
		if c := v[i] | 0x20; (c < 'a' || c > 'z') && (v[i] < '0' || v[i] > '9') {
			return ""
		}
	}
	return v
}

// Describe says what code means, for robotsgate's answers and the audit.
func Describe(code string) string {
	if m, ok := errorCodes[code]; ok {
		return m
	}
	return "a code Cloudflare does not document"
}

// Explain is code and what it means, as the audit's reason and
// robotsgate's answers write it: "crawler-error PaymentFailed (...)".
func Explain(code string) string {
	return "crawler-error " + code + " (" + Describe(code) + ")"
}

// payable reports whether a 402 that names a price and code is still paid:
// MissingCrawlerPrice is a first 402's word for "no price offered", and
// InvalidCrawlerMaxPrice a 402 to a crawler-max-price below the price
// (answered with the exact-price retry, when the price is within the
// terms). Any other code is the site's refusal: never retried.
func payable(code string) bool {
	return code == "" || code == "MissingCrawlerPrice" || code == "InvalidCrawlerMaxPrice"
}
