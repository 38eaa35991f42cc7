# mixer-lightning on a CUDA PyTorch base image. The image's torch is kept (pyproject asks for torch >= 2.3).
#   docker build -t mixer-lightning .
#   docker run --gpus all --ipc=host -v $PWD/data:/app/data -v $PWD/runs:/app/runs mixer-lightning \
#       fit --config configs/imagenet_mixer_b_w.yaml --trainer.devices 8
FROM pytorch/pytorch:2.8.0-cuda12.9-cudnn9-runtime

WORKDIR /app
COPY pyproject.toml README.md ./
COPY mixer_lightning ./mixer_lightning
COPY configs ./configs
RUN pip install --no-cache-dir .

ENTRYPOINT ["mixer"]
CMD ["--help"]
