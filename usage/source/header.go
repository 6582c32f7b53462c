package source

import (
	"context"

	"github.com/robotsgate/robotsgate/usage"
)

// headerSource is a response's headers, in this order: Content-Usage,
// Content-Signal, Tdm-Reservation (usage.HeaderUsage), and X-Robots-Tag
// for the tokens obeyed, noimageai for an image (usage.RobotsTagUsage).
// The first header that refuses a declared purpose answers; none that
// does, nothing.
type headerSource struct{}

// Info declares the source (usage.FromHeader.Info).
func (headerSource) Info() usage.SourceInfo { return usage.FromHeader.Info() }

func (headerSource) Phase() usage.Phase { return usage.OnResponse }

func (headerSource) Judge(_ context.Context, in *Input) (usage.Usage, error) {
	for _, name := range [...]string{"Content-Usage", "Content-Signal", "Tdm-Reservation", "X-Robots-Tag"} {
		vals := in.Header[name]
		if len(vals) == 0 {
			continue
		}
		var u usage.Usage
		if name == "X-Robots-Tag" {
			u = usage.RobotsTagUsage(vals, in.Agents, in.Image)
		} else {
			u = usage.HeaderUsage(name, vals)
		}
		if _, _, ok := u.Refuses(in.Purposes); ok {
			return u, nil
		}
	}
	return usage.Usage{}, nil
}
