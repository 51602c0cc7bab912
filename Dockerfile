# One image for every gapless process: worker, recovery, api, mock-integrator, migrate, publish.
#   docker build -t gapless .        docker run --rm gapless --help
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Install the project from a throw-away copy of the sources: only the installed distribution
# stays in the image, so no source tree can shadow it. The distribution carries the migrations
# (schema/ becomes gapless/_schema), so `gapless migrate` needs no GAPLESS_SCHEMA_DIR.
# psycopg[binary] ships wheels, so the slim image needs no compiler. The versions are those of
# constraints.txt, which CI tests.
COPY pyproject.toml README.md constraints.txt /tmp/src/
COPY gapless /tmp/src/gapless
COPY worker /tmp/src/worker
COPY recovery /tmp/src/recovery
COPY schema /tmp/src/schema
RUN pip install -c /tmp/src/constraints.txt /tmp/src && rm -rf /tmp/src

RUN useradd --system --uid 10001 --home-dir /home/gapless --create-home gapless
USER gapless
WORKDIR /home/gapless

ENTRYPOINT ["gapless"]
CMD ["--help"]
