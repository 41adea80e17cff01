"""A tiny, deterministic GGUF language model with random weights, for tests.

Tests that exercise a real LLM server (``python -m llama_cpp.server``) or ``llama_cpp.Llama`` need a model file,
but a real one is hundreds of megabytes and takes seconds per token on a small CPU. :func:`write_tiny_gguf` writes a
"llama"-architecture model of about 460 KB instead: two layers, 64-wide embeddings, f16 random weights from a seeded
:class:`numpy.random.Generator`. It loads in milliseconds and generates over a thousand tokens a second on one core,
so the whole llama.cpp path (tokenizer, sampling, streaming, the OpenAI-compatible server) runs for real in well under
a second, and the file is the same byte for byte for the same seed. (The sampled text is reproducible too, given
temperature 0 or a fixed ``seed`` per request: llama-cpp-python's sampler state otherwise carries over between calls.)

The output is nonsense, but readable nonsense: the tokenizer is a SentencePiece-style ("llama") vocabulary of common
English words, and the weights are rigged so that sampling picks whole words (and a little punctuation) rather than
word fragments, single characters or raw bytes, and in practice never an end-of-generation token. A completion
therefore always runs to ``max_tokens`` (``finish_reason`` is ``"length"``) unless a ``stop`` sequence cuts it short.
The rigging: every token embedding carries the same constant in channel 0, the blocks neither read that channel (their
norm weights are zero there) nor write it (their output projections have a zero row there), so after the final norm it
is a positive "bias" input, and the output projection's channel-0 column gives each kind of token its own logit offset.

The vocabulary can encode any text: besides the words, their ``▁``-prefixed prefixes (so that SentencePiece's merges
reach every word) and the printable ASCII characters, it has the 256 byte-fallback tokens ``<0x00>``..``<0xFF>``.
``<unk>``, ``<s>`` (BOS) and ``</s>`` (EOS) are the usual ids 0, 1 and 2, and ChatML's ``<|im_start|>`` and
``<|im_end|>`` are control tokens that the ChatML-style chat template in ``tokenizer.chat_template`` uses, so
llama-cpp-python's chat completions work without a ``chat_format`` (it formats with the template from the metadata).
"""

from __future__ import annotations

import pathlib
from typing import Final

import gguf
import numpy as np
import numpy.typing as npt

__all__ = ["CHAT_TEMPLATE", "write_tiny_gguf"]

CHAT_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML, opened with the BOS token (llama-cpp-python adds no BOS of its own to a templated chat prompt)."""

# The word pieces, most common first (the order sets the SentencePiece scores), separated by whitespace.
_WORDS: Final = """
the of and to a in is it you that he was for on are with as I his they be at one have this from or had by hot but
some what there we can out other were all your when up use word how said an each she which do their time if will way
about many then them would write like so these her long make thing see him two has look more day could go come did
my sound no most number who over know water than call first people may down side been now find any new work part
take get place made live where after back little only round man year came show every good me give our under name
very through just form much great think say help low line before turn cause same mean differ move right boy old too
does tell sentence set three want air well also play small end put home read hand port large spell add even land
here must big high such follow act why ask men change went light kind off need house picture try us again animal
point mother world near build self earth father head stand own page should country found answer school grow study
still learn plant cover food sun four thought let keep eye never last door between city tree cross since hard start
might story saw far sea draw left late run while press close night real life few stop open seem together next white
children begin got walk example ease paper often always music those both mark book letter until mile river car feet
care second group carry took rain eat room friend began idea fish mountain north once base hear horse cut sure watch
color face wood main enough
"""

_PUNCTUATION: Final = (".", ",")
_SPACE: Final = "\u2581"  # SentencePiece's "▁", which stands for a space

# Logit offsets per kind of token, before the final norm scales them (by roughly five).
_BIAS_WORD: Final = 1.0
_BIAS_PUNCTUATION: Final = 1.3
_BIAS_FRAGMENT: Final = -1.0  # word prefixes and single characters
_BIAS_BYTE: Final = -1.5
_BIAS_CONTROL: Final = -5.0

_N_EMBD: Final = 64
_N_HEAD: Final = 4
_N_LAYER: Final = 2
_N_FF: Final = 128
_CONTEXT_LENGTH: Final = 2048
_BIAS_CHANNEL_VALUE: Final = 8.0  # the constant in channel 0 of every token embedding
_LOGIT_SCALE: Final = 0.35  # standard deviation of the output projection outside channel 0


def _vocabulary() -> tuple[list[str], list[float], list[gguf.TokenType], list[float]]:
    """The tokens, their SentencePiece scores, their types and their logit offsets, ids in list order."""
    tokens: list[str] = []
    scores: list[float] = []
    types: list[gguf.TokenType] = []
    biases: list[float] = []

    def add(token: str, score: float, token_type: gguf.TokenType, bias: float) -> None:
        tokens.append(token)
        scores.append(score)
        types.append(token_type)
        biases.append(bias)

    add("<unk>", 0.0, gguf.TokenType.UNKNOWN, _BIAS_CONTROL)
    add("<s>", 0.0, gguf.TokenType.CONTROL, _BIAS_CONTROL)
    add("</s>", 0.0, gguf.TokenType.CONTROL, _BIAS_CONTROL)
    for byte in range(256):
        add(f"<0x{byte:02X}>", 0.0, gguf.TokenType.BYTE, _BIAS_BYTE)
    add("<|im_start|>", 0.0, gguf.TokenType.CONTROL, _BIAS_CONTROL)
    add("<|im_end|>", 0.0, gguf.TokenType.CONTROL, _BIAS_CONTROL)

    words = [_SPACE + word for word in dict.fromkeys(_WORDS.split())]
    whole = set(words)
    prefixes = dict.fromkeys(word[:end] for word in words for end in range(2, len(word)) if word[:end] not in whole)
    characters = [_SPACE, *(chr(code) for code in range(0x21, 0x7F))]
    score = -1.0
    for word in words:
        add(word, score, gguf.TokenType.NORMAL, _BIAS_WORD)
        score -= 1.0
    for prefix in prefixes:
        add(prefix, score, gguf.TokenType.NORMAL, _BIAS_FRAGMENT)
        score -= 1.0
    for character in characters:
        bias = _BIAS_PUNCTUATION if character in _PUNCTUATION else _BIAS_FRAGMENT
        add(character, score, gguf.TokenType.NORMAL, bias)
        score -= 1.0
    return tokens, scores, types, biases


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> npt.NDArray[np.float32]:
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)


def write_tiny_gguf(path: pathlib.Path, *, seed: int = 0) -> pathlib.Path:
    """Write the tiny model to ``path`` (a ``.gguf`` file, overwritten if there) and return ``path``.

    The same ``seed`` gives a byte-identical file; the weights, and so the generated text, differ between seeds.
    """
    tokens, scores, types, biases = _vocabulary()
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)

    token_embd = _normal(rng, (n_vocab, _N_EMBD), 1.0)
    token_embd[:, 0] = _BIAS_CHANNEL_VALUE
    block_norm = np.ones(_N_EMBD, dtype=np.float32)
    block_norm[0] = 0.0  # the blocks never see the bias channel...
    layers: list[dict[str, npt.NDArray[np.float32]]] = []
    for _ in range(_N_LAYER):
        attn_output = _normal(rng, (_N_EMBD, _N_EMBD), _N_EMBD**-0.5)
        ffn_down = _normal(rng, (_N_EMBD, _N_FF), _N_FF**-0.5)
        attn_output[0, :] = 0.0  # ...and never change it
        ffn_down[0, :] = 0.0
        layers.append(
            {
                "attn_norm": block_norm,
                "attn_q": _normal(rng, (_N_EMBD, _N_EMBD), _N_EMBD**-0.5),
                "attn_k": _normal(rng, (_N_EMBD, _N_EMBD), _N_EMBD**-0.5),
                "attn_v": _normal(rng, (_N_EMBD, _N_EMBD), _N_EMBD**-0.5),
                "attn_output": attn_output,
                "ffn_norm": block_norm,
                "ffn_gate": _normal(rng, (_N_FF, _N_EMBD), _N_EMBD**-0.5),
                "ffn_up": _normal(rng, (_N_FF, _N_EMBD), _N_EMBD**-0.5),
                "ffn_down": ffn_down,
            }
        )
    output = _normal(rng, (n_vocab, _N_EMBD), _LOGIT_SCALE)
    output[:, 0] = biases

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(f"sse-tape tiny random llama (seed {seed})")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_vocab_size(n_vocab)
    writer.add_context_length(_CONTEXT_LENGTH)
    writer.add_embedding_length(_N_EMBD)
    writer.add_block_count(_N_LAYER)
    writer.add_feed_forward_length(_N_FF)
    writer.add_head_count(_N_HEAD)
    writer.add_head_count_kv(_N_HEAD)
    writer.add_rope_dimension_count(_N_EMBD // _N_HEAD)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)

    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    # Matrices in f16 to halve the file; norm weights stay f32, as llama.cpp expects.
    writer.add_tensor("token_embd.weight", token_embd.astype(np.float16))
    for index, layer in enumerate(layers):
        for name, weights in layer.items():
            tensor = weights if weights.ndim == 1 else weights.astype(np.float16)
            writer.add_tensor(f"blk.{index}.{name}.weight", tensor)
    writer.add_tensor("output_norm.weight", np.ones(_N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", output.astype(np.float16))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
