#!/usr/bin/env bash
# On the GPU machine, from the checkout root with .gpu/ beside it (.gpu/bin/kiln), as
# `bash measure.sh [all|fixtures|models]`: batch-1
# `kiln bench` of the PyTorch fixtures and of ResNet-50 / BERT-base with and without CUDA
# graphs, and PyTorch eager / torch.compile in the same call. Figures under $OUT.
set -u
out=${OUT:-/tmp}
V=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:$V/cu13/lib:$V/cudnn/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export KILN_CUDA_INCLUDE=${KILN_CUDA_INCLUDE:-/usr/local/cuda/include}
kiln=.gpu/bin/kiln
bench() { # name model [fp16]: builds once, then benches the engine with and without graphs
  local name=$1 model=$2 engine=/tmp/$1.engine
  timeout 200 $kiln build "$model" --backend cuda ${3:+--flag fp16} -o "$engine" > "$out/${name}_build.txt" 2>&1 \
    || { echo "kiln build $name failed: $(tail -3 "$out/${name}_build.txt")"; return; }
  for graph in "" --no-cuda-graph; do
    local tag=$name${graph:+_nograph}
    timeout 60 $kiln bench "$engine" --warmup-ms 300 --duration-s 2 --json "$out/$tag.json" $graph \
      > "$out/$tag.txt" 2>&1 || echo "kiln bench $tag failed: $(tail -3 "$out/$tag.txt")"
    grep -E "^(latency|GPU compute|H2D|D2H|CUDA graph)" "$out/$tag.txt" | sed "s/^/$tag  /"
  done
}
what=${1:-all}   # all | fixtures | models
if [ "$what" != models ]; then
  bench cnn tests/data/pytorch/cnn_torchscript.onnx
  bench bert_mini tests/data/pytorch/bert_torchscript.onnx
  bench cnn_fp16 tests/data/pytorch/cnn_torchscript.onnx fp16
fi
[ "$what" = fixtures ] && exit 0
models=/tmp/kiln-models; mkdir -p $models
/opt/torch/.venv/bin/python backends/cuda/bench/torch_peers.py $models > "$out/torch_peers.log" 2>&1
cp $models/torch_peers.json "$out/" 2>/dev/null; grep -E "^(exported|resnet50|bert_base)|Error" "$out/torch_peers.log"
bench resnet50_fp16 $models/resnet50.onnx fp16
bench bert_base_fp16 $models/bert_base.onnx fp16
