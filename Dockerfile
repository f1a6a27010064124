# One image for every rmqstore container: the four services, the CLI and the Spark rebuild.
#   docker build -t rmqstore:0.1.0 .
#   docker build --build-arg WITH_SPARK=false -t rmqstore:0.1.0-nospark .   # no Java, no PySpark

# Debian 12 (bookworm) ships the OpenJDK 17 that Spark runs on; later Debian releases do not.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: generate the gRPC code from protos/ with the project's own Makefile ---------------
FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml Makefile ./
COPY protos/ protos/
COPY rmqstore/ rmqstore/
COPY services/ services/
COPY pipelines/ pipelines/
# `make protos` needs only grpcio-tools in the venv it uses; mark that venv as set up so make
# does not install the whole dev tool chain into the build stage.
RUN python -m venv /opt/protoc \
 && /opt/protoc/bin/pip install --no-cache-dir -q "grpcio-tools>=1.60" \
 && touch /opt/protoc/.installed \
 && make protos VENV=/opt/protoc \
 && ls rmqstore/v1/commitlog_pb2.py rmqstore/v1/query_pb2_grpc.py \
 && pip wheel --no-cache-dir --no-deps -q -w /dist .

# --- runtime ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG WITH_SPARK=true
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Java runs Spark for `rmqstore rebuild`.
RUN if [ "$WITH_SPARK" = "true" ]; then \
      mkdir -p /usr/share/man/man1 \
      && apt-get update \
      && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
      && rm -rf /var/lib/apt/lists/*; \
    fi
# Only the wheel goes into the image, no source tree; the check imports every package from
# site-packages and runs the command (the packaging test runs the same script on the wheel).
COPY --from=build /dist/ /tmp/dist/
COPY deploy/check_install.py /tmp/check_install.py
RUN cd / \
 && wheel="$(ls /tmp/dist/rmqstore-*.whl)" \
 && if [ "$WITH_SPARK" = "true" ]; then \
      pip install "${wheel}[spark]" && python /tmp/check_install.py --spark; \
    else \
      pip install "${wheel}" && python /tmp/check_install.py; \
    fi \
 && rm -rf /tmp/dist /tmp/check_install.py
# Same uid/gid as the Helm chart's podSecurityContext; owns nothing in the image.
RUN groupadd --system --gid 10001 rmqstore \
 && useradd --system --uid 10001 --gid rmqstore --no-create-home --home-dir /tmp rmqstore \
 && mkdir -p /data && chown rmqstore:rmqstore /data
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
# The chart's ports: gRPC 8100 writer, 8101 query, 8102 consume-queue, 8103 index,
# 8081 proxy (RocketMQ 5 clients); 8105 console (HTTP); 10912 HA (slaves connect here);
# RocketMQ 4.x remoting 10911 broker, 9876 name server; metrics 8110-8114, 8117, 8118
EXPOSE 8081 8100 8101 8102 8103 8105 8110 8111 8112 8113 8114 8117 8118 9876 10911 10912
ENTRYPOINT []
CMD ["rmqstore", "--help"]
