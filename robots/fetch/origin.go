package fetch

// The package's tests name a type origin (a test server): the package is
// imported as originpkg.
import originpkg "github.com/robotsgate/robotsgate/robots/fetch/origin"

// Origin is the scope of one robots.txt file and the cache key: an
// origin.Origin (package origin), named here so that no caller changes.
type Origin = originpkg.Origin

// ErrBadOrigin is wrapped by the errors of ParseOrigin and OriginOf.
var ErrBadOrigin = originpkg.ErrBad

// ParseOrigin returns the origin of an absolute http or https URL
// (origin.Parse).
func ParseOrigin(rawURL string) (Origin, error) { return originpkg.Parse(rawURL) }

// OriginOf returns the origin of a scheme and an authority (origin.Of).
func OriginOf(scheme, authority string) (Origin, error) { return originpkg.Of(scheme, authority) }
