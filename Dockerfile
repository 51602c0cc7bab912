# One image for every gapless process: worker, recovery, api, mock-integrator, migrate, publish.
#   docker build -t gapless .        docker run --rm gapless --help
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Install the project from a throw-away copy of the sources: only the installed distribution
# stays in the image, so no source tree can shadow it. psycopg[binary] ships wheels, so the
# slim image needs no compiler.
COPY pyproject.toml README.md /tmp/src/
COPY gapless /tmp/src/gapless
COPY worker /tmp/src/worker
COPY recovery /tmp/src/recovery
RUN pip install /tmp/src && rm -rf /tmp/src

# The migrations are not part of the Python package (schema/ is a folder, not an import
# package); `gapless migrate` finds them through GAPLESS_SCHEMA_DIR.
COPY schema /opt/gapless/schema
ENV GAPLESS_SCHEMA_DIR=/opt/gapless/schema

RUN useradd --system --uid 10001 --home-dir /home/gapless --create-home gapless
USER gapless
WORKDIR /home/gapless

ENTRYPOINT ["gapless"]
CMD ["--help"]
