#!/bin/bash
# device: execute the given notebooks with the GPU suite; everything it wrote comes back in $OUT/nb.tar.gz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L; python3 -c "import torch,triton,torchao;print(torch.__version__,triton.__version__,torchao.__version__)"
timeout ${NB_TIMEOUT:-570} python3 benchmarks/gpu_suite.py --skip-tests --skip-benchmarks --tag h100 --archive $OUT/nb.tar.gz --notebooks "$@" 2>&1 | tee $OUT/nb-log.txt | grep -v "^\s*$" | tail -60
