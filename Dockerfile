# Image for every accelpool component (extender, device plugin, simulator,
# libaccelpool-cuda.so, the chart's certgen hook, kubectl-accelpool). The chart runs it as
# accelpool/accelpool:<appVersion> with a command per component.
#
#   docker build -t accelpool/accelpool:0.1.0 .
#
# Build stage: the same Debian packages the project builds with.
FROM debian:bookworm AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ca-certificates \
      libcpprest-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc \
      nlohmann-json3-dev libspdlog-dev libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DACCELPOOL_BUILD_TESTS=OFF -DACCELPOOL_BUILD_BENCH=OFF \
    && cmake --build /build -j"$(nproc)" \
    && mkdir -p /out/bin /out/lib \
    && find /build -type f -perm -u+x \( -name 'accelpool-*' -o -name 'kubectl-accelpool' \) \
         -exec cp {} /out/bin/ \; \
    && find /build -type f -name 'libaccelpool-cuda.so*' -exec cp {} /out/lib/ \; \
    && cp scripts/accelpool-certgen.sh /out/bin/accelpool-certgen

# Runtime stage: the run-time libraries come in through the same -dev
# packages (simple and always matching the build; slimmer images can name
# the versioned library packages instead), plus openssl and curl for certgen.
FROM debian:bookworm-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates openssl curl libcpprest-dev libgrpc++-dev libspdlog-dev \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/lib/ /usr/local/lib/accelpool/
RUN ldconfig
# No NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES here: every component
# runs this image, and on a node whose default runtime is NVIDIA's they would
# hand all GPUs to the extender too. The chart sets them on the NVIDIA
# device-plugin DaemonSet only (devicePlugin.vendors.nvidia.env: all, utility),
# which is what makes the NVIDIA container runtime inject libnvidia-ml.so.1.
# Outside the chart: docker run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all
#   -e NVIDIA_DRIVER_CAPABILITIES=utility ... accelpool-device-plugin --backend=nvidia
USER 65532:65532
ENTRYPOINT []
CMD ["accelpool-extender", "--help"]
