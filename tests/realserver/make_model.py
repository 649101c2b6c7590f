"""Build the real-server tier's model: a 4-layer Qwen2 with seeded random weights and a trained tokenizer.

Runs in the vLLM CPU venv (``transformers``, ``tokenizers`` and ``torch`` are there), never in kvpilot's. No
download: the weights are drawn from a seeded generator and the byte-level BPE tokenizer is trained on text this
script generates from a seeded word list, so two machines build the same model. Outputs are gibberish; the server,
its scheduler, KV cache and metrics are real.

    python make_model.py OUT_DIR

Writes ``config.json``, the weights, ``generation_config.json`` and the tokenizer into ``OUT_DIR``, then
``kvpilot-model.json`` (the build's description) last: a folder with that file is complete.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

#: the model's shape: KV bytes per token = 2 (K, V) x 4 layers x 2 KV heads x 64 x 2 bytes (bf16) = 2,048
SHAPE = {
    "vocab_size": 2048,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}
SEED = 20261207
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def training_text(rng: random.Random, lines: int = 4000) -> list[str]:
    """Lines of seeded pseudo-words (letters drawn with English-like frequencies), for the BPE trainer."""
    letters = "eeeeeeeeeeeetttttttttaaaaaaaaoooooooiiiiiiinnnnnnnssssssrrrrrrhhhhhllllddduuucccmmmwwffggyyppbbvk"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(8, 30))) for _ in range(lines)]


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    config = Qwen2Config(**SHAPE, bos_token_id=0, eos_token_id=0, torch_dtype="bfloat16")
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    GenerationConfig(bos_token_id=0, eos_token_id=0).save_pretrained(out)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=SHAPE["vocab_size"],
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(random.Random(SEED)), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    (out / "kvpilot-model.json").write_text(json.dumps({"shape": SHAPE, "seed": SEED}, sort_keys=True))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_model.py OUT_DIR")
    build(Path(sys.argv[1]))
