# Detour Lab on a CUDA machine: docker build -t detour-lab . && docker run --gpus all -p 7860:7860 detour-lab
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 GRADIO_ANALYTICS_ENABLED=False
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip python3-venv git \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
COPY requirements.txt requirements-gpu.txt ./
# The CUDA build of the pinned torch, then the rest, then flash-attn against it.
RUN pip install torch==2.13.0 && pip install -r requirements.txt \
    && (pip install -r requirements-gpu.txt --no-build-isolation || echo "flash-attn unavailable: sdpa is used")
COPY . .
EXPOSE 7860
# Inside a container the app must listen beyond loopback; protect it with DETOUR_PASSWORD.
CMD ["python", "-m", "app", "--host", "0.0.0.0", "--port", "7860"]
