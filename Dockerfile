# The worker daemon. State lives on the /var/lib/worker volume so a restarted container
# reuses its local RocksDB stores instead of restoring them from the changelogs.
#
#   docker build -t worker .
#   docker run --stop-timeout 60 -v worker-state:/var/lib/worker \
#       -e WORKER_BOOTSTRAP_SERVERS=kafka:9092 worker
#
# --stop-timeout: docker SIGKILLs 10 s after its SIGTERM by default, before the worker's
# own shutdown.timeout.ms (30 s) has run out; give it longer.
#
# The base image is pinned to the exact Python release CI runs (3.11.7) and Debian release.
# Pin it by digest too where the registry is reachable (the build machine of this image
# was not): `docker buildx imagetools inspect python:3.11.7-slim-bookworm` prints it; then
# FROM python:3.11.7-slim-bookworm@sha256:<digest>
FROM python:3.11.7-slim-bookworm

# WORKER_HTTP_HOST: the HTTP server must be reachable from outside the container
# (probes, scraping); it overrides http.host from the config file.
# WORKER_HTTP_MANAGEMENT_PORT: probes and /metrics on their own listener, so clients
# holding every query connection (http.max.connections) never fail the health check;
# like WORKER_HTTP_HOST it overrides the config file (pass -e to change it).
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    WORKER_HTTP_HOST=0.0.0.0 \
    WORKER_HTTP_MANAGEMENT_PORT=8081

RUN groupadd --system --gid 10001 worker \
    && useradd --system --uid 10001 --gid worker --no-create-home \
       --home-dir /var/lib/worker --shell /usr/sbin/nologin worker \
    && mkdir -p /var/lib/worker /etc/worker \
    && chown worker:worker /var/lib/worker

# Runtime dependencies only (no dev extra); every one ships a manylinux wheel. Their
# versions (and those of what they pull in) are the ones CI tested: constraints.txt.
COPY pyproject.toml README.md constraints.txt /src/
COPY worker /src/worker
RUN pip install --constraint /src/constraints.txt /src && rm -rf /src

COPY config/worker.toml /etc/worker/worker.toml

USER worker
WORKDIR /var/lib/worker
VOLUME /var/lib/worker
EXPOSE 8080 8081

# slim has no curl: probe /healthz with the interpreter that is already there. The probe
# reads the port (http.management.port, else http.port) and TLS from the same config
# file and WORKER_* variables as the worker: no port is written here.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "worker.http.probe", "--config", "/etc/worker/worker.toml"]

# SIGTERM: stop fetching, commit, write .checkpoint files, leave the group, exit 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["worker"]
CMD ["start", "--config", "/etc/worker/worker.toml", "--state-dir", "/var/lib/worker"]
