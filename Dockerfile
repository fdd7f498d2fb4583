# Stage 1 builds the wheel exactly as .ci/run does; stage 2 installs that wheel and nothing of the source.
FROM python:3.11-slim AS build
# A C compiler for the compiled walks (protocol/_compiled.c); the wheel carries them built, stage 2 needs none.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY quota ./quota
COPY config ./config
COPY proxy ./proxy
COPY pipeline ./pipeline
RUN pip wheel --no-cache-dir --no-deps -w /dist .

FROM python:3.11-slim
COPY --from=build /dist /dist
# The `broker` extra brings the test broker (librdkafka's mock cluster) for the compose demo's smoke runs.
RUN pip install --no-cache-dir "$(ls /dist/sluice_kafka-*.whl)[broker]" && rm -rf /dist
# Bootstrap listener 9092, broker N on 9100 + N, Prometheus on 9404.
EXPOSE 9092 9100-9110 9404
ENTRYPOINT ["sluice"]
CMD ["run", "--config", "/etc/sluice/sluice.yaml"]
