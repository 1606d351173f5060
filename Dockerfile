# syntax=docker/dockerfile:1
# Multi-stage build: a static binary in a distroless, non-root image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.buildVersion=${VERSION}" -o /out/gemini-proxy ./cmd/gemini-proxy

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gemini-proxy /gemini-proxy
USER 65532:65532
EXPOSE 8080 9090
# The binary checks its own admin listener (no shell or curl in the image):
# `health` reads admin.listen as `serve` does, from GEMINI_PROXY_ADMIN_LISTEN
# or the file GEMINI_PROXY_CONFIG names. A config file passed only as
# `serve --config` is not seen by the check: set GEMINI_PROXY_CONFIG instead.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/gemini-proxy", "health"]
ENTRYPOINT ["/gemini-proxy"]
CMD ["serve"]
