package source

import (
	"context"

	"github.com/robotsgate/robotsgate/usage"
)

// robotsTxtSource is robots.txt's own Content-Usage and Content-Signal
// lines (robots.Group.Usage), judged beside its rules for each token
// obeyed: on each path of Input.Paths under Input.Budget, or, Everywhere,
// on every path (robots.Group.UsageEverywhere). Its verdicts carry the
// line of robots.txt. Running out of budget is the rules' to report: the
// caller checks Input.Budget.
type robotsTxtSource struct{}

// Info declares the source (usage.FromRobotsTxt.Info).
func (robotsTxtSource) Info() usage.SourceInfo { return usage.FromRobotsTxt.Info() }

func (robotsTxtSource) Phase() usage.Phase { return usage.WithRules }

func (robotsTxtSource) Judge(_ context.Context, in *Input) (usage.Usage, error) {
	var u usage.Usage
	if in.Rules == nil {
		return u, nil
	}
	g := in.Rules.Group(in.Token)
	if in.Everywhere {
		return g.UsageEverywhere(), nil
	}
	for _, path := range in.Paths {
		v, _ := g.UsageWithin(path, in.Budget)
		u.Combine(&v)
	}
	return u, nil
}
