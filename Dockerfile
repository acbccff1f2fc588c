# syntax=docker/dockerfile:1
#
# The Bulwark gateway image: the release build (scripts/build: a static
# binary, version, commit and date stamped) on distroless/static, running
# as a non-root user (65532), ready for a read-only root filesystem: the
# only thing the gateway writes is its generated control token, in
# BULWARK_STATE_DIR (/var/lib/bulwark), a volume or a tmpfs.
#
#   docker build -t bulwark \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg COMMIT="$(git rev-parse HEAD)" .
#
#   # The quickstart (a demo upstream inside the binary), as in the README:
#   docker run --rm -p 8080:8080 bulwark
#
#   # Your configuration, root filesystem read-only:
#   docker run --rm --read-only \
#     --tmpfs /var/lib/bulwark:uid=65532,gid=65532,mode=0700 \
#     -v "$PWD/bulwark.yaml:/etc/bulwark/bulwark.yaml:ro" \
#     -p 8080:8080 -p 7921:7921 \
#     bulwark serve --config /etc/bulwark/bulwark.yaml
#
# In a container the configuration must listen on 0.0.0.0 (listen.addr,
# metrics.addr): the defaults are loopback. The control API stays on
# loopback inside the container (`docker exec NAME bulwark ctl status`
# finds the generated token in the state directory) unless a token is
# configured. See docs/install.md.

ARG GO_VERSION=1.26

# --- build: the same scripts/build a release runs, cross-compiled on the
# builder's own platform -----------------------------------------------
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
ARG DATE=
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH VERSION=$VERSION COMMIT=$COMMIT DATE=$DATE \
    scripts/build -o /out/bulwark
# The state directory, owned by the runtime user (a named volume mounted
# there starts as a copy of it; distroless has no shell to make it).
RUN mkdir -p /out/state && chown 65532:65532 /out/state && chmod 0700 /out/state

# --- runtime: no shell, no package manager, no libc ---------------------
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bulwark /usr/local/bin/bulwark
COPY --from=build --chown=65532:65532 /out/state /var/lib/bulwark
ENV BULWARK_STATE_DIR=/var/lib/bulwark
VOLUME ["/var/lib/bulwark"]
USER 65532:65532
# listen, metrics (the control API, 7922, stays on loopback)
EXPOSE 8080 7921
# `bulwark health` asks the client listener's /readyz (no shell needed).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/bulwark", "health", "--addr", "127.0.0.1:8080"]
ENTRYPOINT ["/usr/local/bin/bulwark"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--metrics-listen", "0.0.0.0:7921"]
