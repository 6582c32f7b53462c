module github.com/robotsgate/robotsgate

go 1.26.8

require (
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
