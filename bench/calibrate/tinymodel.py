"""A small Llama model directory made on the spot: config, tokenizer, chat template, no weights.

vLLM serves it with `--load-format dummy` (random weights), which is all a timing measurement
needs; `write_random_weights` adds seeded weights large enough that the answers depend on
the prompt. The tokenizer is trained in about a second on the repository's own source and docs.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Llama shape; head_dim = hidden / heads must be ≥ 32 on vLLM's CPU backend."""

    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 256
    vocab_size: int = 4096  # the tokenizer's trained size replaces this if smaller
    max_position_embeddings: int = 4096
    torch_dtype: str = "bfloat16"

    def describe(self) -> str:
        return (
            f"LlamaForCausalLM hidden {self.hidden_size}, {self.num_hidden_layers} layers, "
            f"{self.num_attention_heads} heads / {self.num_key_value_heads} KV heads "
            f"(head_dim {self.hidden_size // self.num_attention_heads}), "
            f"intermediate {self.intermediate_size}, vocab {self.vocab_size}, {self.torch_dtype}, "
            "dummy weights"
        )


# "tiny" is REFERENCE.md's test model, the one kvgate's benchmarks run on real vLLM; on one
# engine thread it prefills ~0.2 ms/token and decodes in ~5 ms steps. "small" is ~8x the
# compute per token (prefill ~1.1 ms/token, decode ~10 ms), for when Python overheads
# should matter less; its full grid takes far longer.
MODELS = {
    "tiny": ModelSpec(),
    "small": ModelSpec(
        hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=768
    ),
}


def write_model_dir(directory: Path, spec: ModelSpec, python: Path, repo: Path) -> ModelSpec:
    """Write the model directory; return the spec with the vocabulary size actually trained."""
    directory.mkdir(parents=True, exist_ok=True)
    corpus = directory / "corpus.txt"
    with corpus.open("w", encoding="utf-8") as out:
        for path in _corpus_files(repo):
            out.write(path.read_text(encoding="utf-8", errors="replace"))
    script = Path(__file__).with_name("train_tokenizer.py")
    tokenizer = directory / "tokenizer.json"
    done = subprocess.run(
        [str(python), str(script), str(tokenizer), str(spec.vocab_size), str(corpus)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    corpus.unlink()
    vocab = int(done.stdout.strip().splitlines()[-1])
    spec = ModelSpec(**{**asdict(spec), "vocab_size": vocab})
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **asdict(spec),
        "head_dim": spec.hidden_size // spec.num_attention_heads,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": spec.max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    return spec


def write_random_weights(directory: Path, python: Path, seed: int = 0, std: float = 0.05) -> Path:
    """`model.safetensors` of seeded N(0, std²) weights for the model in `directory` (served
    then without `--load-format dummy`): answers that depend on the whole prompt."""
    script = Path(__file__).with_name("random_weights.py")
    subprocess.run(
        [str(python), str(script), str(directory), str(seed), str(std)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return directory / "model.safetensors"


def _corpus_files(repo: Path) -> list[Path]:
    """The repository's own Python and Markdown, outside hidden and output directories."""
    skip = {"out", "build", "dist"}
    return sorted(
        p
        for pattern in ("**/*.py", "**/*.md")
        for p in repo.glob(pattern)
        if not any(part.startswith(".") or part in skip for part in p.relative_to(repo).parts)
        and not p.relative_to(repo).parts[0].endswith(".egg-info")
    )
