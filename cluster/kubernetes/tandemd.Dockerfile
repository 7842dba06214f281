# tandemd's image for the tandemd DaemonSet: tandemd and tandemctl as deploy/bundle-gpu.sh packs them
# (the binaries and their non-system libraries, not CUDA's), on an image with the CUDA runtime and
# cuDNN the build used. The NVIDIA container runtime adds the driver and nvidia-smi at run time. The
# launcher, tandemd-per-gpu.sh, comes from a ConfigMap (manifests/kustomization.yaml).
#
#   TARGETS="tandemd tandemctl" deploy/bundle-gpu.sh
#   docker build -f cluster/kubernetes/tandemd.Dockerfile --build-arg CUDA_IMAGE=... -t tandem/tandemd:0.1.0 .bundle
#
# CUDA_IMAGE: a CUDA runtime + cuDNN image of the CUDA version Tandem was built with, on a distribution
# whose glibc and libstdc++ are at least Debian 12's (the bundle leaves both out). Not built in CI (no
# container engine there); see README.md.
ARG CUDA_IMAGE
FROM ${CUDA_IMAGE}
COPY bin/tandemd bin/tandemctl /opt/tandem/bin/
COPY lib/ /opt/tandem/lib/
ENV PATH=/opt/tandem/bin:${PATH} \
    LD_LIBRARY_PATH=/opt/tandem/lib:/usr/local/cuda/lib64
