# syntax=docker/dockerfile:1
# hetsched's images for those with a registry:
#   docker build -t REGISTRY/hetsched:0.1.0 .                                          (scheduler, controller, webhook)
#   docker build --build-arg EXTRAS=agents,nvidia -t REGISTRY/hetsched-node:0.1.0 .    (node agents, device plugins)
# The same layout as scripts/build-image.sh's registry-free build (both run deploy/image/install.sh; kept
# alike by tests/test_image.py): /opt/hetsched holds a virtual environment with the image's requirements
# (deploy/image/requirements.py) at requirements.lock's versions and hetsched's wheel, run as the non-root
# user hetsched (65532) with `hetsched` as the entrypoint.
FROM python:3.11-slim AS wheels
ARG EXTRAS=""
WORKDIR /src
COPY . .
RUN pip wheel --quiet --no-cache-dir --no-deps --wheel-dir /wheels . \
 && pip download --quiet --no-cache-dir --only-binary=:all: --no-deps --dest /wheels --requirement requirements.lock \
 && cp requirements.lock /wheels/ \
 && python3 deploy/image/requirements.py pyproject.toml "$EXTRAS" > /wheels/image-requirements.txt

FROM python:3.11-slim
RUN --mount=type=bind,from=wheels,source=/wheels,target=/wheels \
    --mount=type=bind,source=deploy/image/install.sh,target=/install.sh \
    sh /install.sh deps /wheels
RUN --mount=type=bind,from=wheels,source=/wheels,target=/wheels \
    --mount=type=bind,source=deploy/image/install.sh,target=/install.sh \
    sh /install.sh hetsched /wheels
ENV PATH=/opt/hetsched/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/opt/hetsched/bin/hetsched"]
