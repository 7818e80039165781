"""Write seeded random weights for a model directory; run by the vLLM venv's Python (torch,
transformers, safetensors).

Usage: python random_weights.py MODEL_DIR SEED STD

`model.safetensors` next to the directory's `config.json`: the Llama of that config with
its linear and embedding weights drawn from N(0, STD²) (transformers' initialisation,
seeded), norms at 1. vLLM's `--load-format dummy` draws from ±0.001, which makes every
logit nearly equal: greedy output then hardly depends on the prompt, and an answer equal
to another proves little. These weights make the next token depend on the whole prompt.
"""

import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, LlamaForCausalLM


def main() -> None:
    directory, seed, std = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    config = AutoConfig.from_pretrained(directory)
    config.initializer_range = std
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, f"{directory}/model.safetensors", metadata={"format": "pt"})
    print(sum(t.numel() for t in tensors.values()))


if __name__ == "__main__":
    main()
