# syntax=docker/dockerfile:1
# robotsgate: a static, non-root image. Build: docker build --build-arg VERSION=1.0.0 -t robotsgate .
# .ci/docker-check runs these same steps without a container engine.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/robotsgate . \
 && mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:nonroot
# distroless/static has CA certificates, /etc/passwd with "nonroot"
# (65532), and no shell; no proxy variables are set.
COPY --from=build /out/robotsgate /usr/local/bin/robotsgate
COPY docker/config.toml /etc/robotsgate/config.toml
COPY --from=build --chown=65532:65532 --chmod=0700 /out/state /var/lib/robotsgate
USER 65532:65532
VOLUME ["/var/lib/robotsgate"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/robotsgate", "healthcheck", "-config", "/etc/robotsgate/config.toml"]
ENTRYPOINT ["/usr/local/bin/robotsgate"]
CMD ["serve", "-config", "/etc/robotsgate/config.toml"]
