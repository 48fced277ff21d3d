# syntax=docker/dockerfile:1
#
# Turnstile in a small, non-root image.
#
#   docker build -t turnstile .
#   docker run -p 6379:6379 -p 9898:9898 -e TURNSTILE_REQUIREPASS=secret turnstile
#
# Inside the container Turnstile listens on 0.0.0.0. Protected mode stays on:
# clients from outside the container are refused until a password is set
# (TURNSTILE_REQUIREPASS) or protected mode is turned off explicitly
# (TURNSTILE_PROTECTED_MODE=no), as with Redis.
# On the metrics port, /metrics and /healthz answer anyone (Prometheus
# scrapes them by pod IP or service name); the status page and POST /json
# show key names and change limits, so they follow the same rule: no one
# from outside until a password is set, then only with it (HTTP Basic or a
# bearer token; docs/operations.md, "Protecting the metrics port").

# The toolchain this repository is built and tested with.
ARG RUST_VERSION=1.95

# Dependencies are compiled in their own layer (cargo-chef), so a change to
# the sources does not rebuild them.
FROM rust:${RUST_VERSION}-bookworm AS chef
RUN cargo install cargo-chef --locked --version 0.1.71
WORKDIR /build

FROM chef AS planner
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /build/recipe.json recipe.json
RUN cargo chef cook --release --locked --recipe-path recipe.json --bin turnstile
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin turnstile && mkdir -p /build/data

# Runtime: glibc and CA certificates only, no shell, fixed non-root user.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /build/target/release/turnstile /usr/local/bin/turnstile
# An empty directory the non-root user owns, for --snapshot: mount a volume
# here (a new named volume takes this ownership) and set
# TURNSTILE_SNAPSHOT=/data/turnstile.tsnap so restarts keep every count.
COPY --from=builder --chown=65532:65532 /build/data /data
USER 65532:65532
ENV TURNSTILE_BIND=0.0.0.0 \
    TURNSTILE_PORT=6379 \
    TURNSTILE_METRICS_ADDR=0.0.0.0:9898
EXPOSE 6379 9898
# The healthcheck is a subcommand of the binary: no shell or redis-cli in
# the image. It PINGs 127.0.0.1 (loopback, so protected mode allows it).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/turnstile", "healthcheck"]
# Turnstile handles SIGTERM: stops accepting, finishes replies, writes its
# final snapshot (with --snapshot), exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/turnstile"]
