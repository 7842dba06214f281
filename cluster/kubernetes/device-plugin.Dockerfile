# The device plugin's image: Debian 12's Python 3 with grpcio and protobuf, the plugin, and the module
# protoc generates from deviceplugin_v1beta1.proto (protoc 3.21 for Debian's python3-protobuf 4.21).
#
#   docker build -f cluster/kubernetes/device-plugin.Dockerfile -t tandem/device-plugin:0.1.0 cluster/kubernetes
#
# Not built in CI (no container engine there); see README.md.
FROM debian:12-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-grpcio python3-protobuf protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
COPY tandem_device_plugin.py deviceplugin_v1beta1.proto /opt/tandem/kubernetes/
RUN protoc -I /opt/tandem/kubernetes --python_out=/opt/tandem/kubernetes /opt/tandem/kubernetes/deviceplugin_v1beta1.proto \
 && python3 -c "import sys; sys.path.insert(0, '/opt/tandem/kubernetes'); import deviceplugin_v1beta1_pb2"
ENV PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["/usr/bin/python3", "/opt/tandem/kubernetes/tandem_device_plugin.py", "--proto-module-dir=/opt/tandem/kubernetes"]
