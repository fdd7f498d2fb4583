FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY quota ./quota
COPY config ./config
COPY proxy ./proxy
RUN pip install --no-cache-dir '.[broker]'
# Bootstrap listener 9092, broker N on 9100 + N, Prometheus on 9404.
EXPOSE 9092 9100-9110 9404
ENTRYPOINT ["sluice"]
CMD ["run", "--config", "/etc/sluice/sluice.yaml"]
