"""Long texts are tokenized from a prefix (``protocol.tokenize_with``): the ids must be exactly those of
the whole text, for the served MiniLM tokenizer and for the other pre-tokenizer kinds a model
artifact may ship (byte-level BPE, SentencePiece's Metaspace), and a tokenizer that does not split
words at blanks must be given every text whole."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from neuronserve.protocol import PREFIX_CHARS_PER_TOKEN, tokenize_with
from runtime_support import minilm_dir

MAX_LENGTH = 128
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "inference",
    "neuron",
    "café",
    "naïve",
    "Ünïcödé",
    "tokenization-with-hyphens",
    "don't",
    "e.g.",
    "3.14159",
    "#hashtag",
    "@user",
    "https://example.com/a?b=c",
]
ODD = [
    "\u3000",
    "\u00a0",
    "\t",
    "\n",
    "\r\n",
    "  ",
    "\u200b",
    "e\u0301",
    "日本語のテキスト",
    "🙂🚀",
    "\x1c",
    "\x00",
    "—",
    "ß",
]


class Recording:
    """A tokenizer that records the texts it is asked to encode (the Rust object takes no attributes)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.pre_tokenizer = tokenizer.pre_tokenizer
        self.encoded: list[str] = []

    def no_padding(self) -> None:
        self.tokenizer.no_padding()

    def enable_truncation(self, max_length: int) -> None:
        self.tokenizer.enable_truncation(max_length=max_length)

    def encode_batch(self, texts: Sequence[str]) -> Any:
        self.encoded.extend(texts)
        return self.tokenizer.encode_batch(list(texts))


def whole_ids(path: Path | Tokenizer, text: str) -> list[int]:
    tokenizer = Tokenizer.from_file(str(path)) if isinstance(path, Path) else path
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_LENGTH)
    return list(tokenizer.encode(text).ids)


def texts(seed: int) -> list[str]:
    """Long texts of words, odd characters and blank runs, some placed where the prefix is cut."""
    rng = random.Random(seed)
    made = []
    for _ in range(12):
        parts: list[str] = []
        while sum(map(len, parts)) < rng.choice([2_500, 6_000, 20_000]):
            roll = rng.random()
            if roll < 0.75:
                parts.append(rng.choice(WORDS))
            elif roll < 0.95:
                parts.append(rng.choice(ODD))
            else:
                parts.append(" " * rng.randint(1, 400))
            parts.append(rng.choice([" ", " ", " ", "\n", "", "\t"]))
        made.append("".join(parts))
    cut_at = MAX_LENGTH * PREFIX_CHARS_PER_TOKEN
    made += [
        "word " * 3000,  # plenty of tokens in the prefix: cut
        "x" * (cut_at + 10) + " tail " * 100,  # the first blank only after the prefix's length
        "y" * 50_000,  # no blank at all: whole
        "a " + " " * (cut_at * 2) + "b " * 500,  # a prefix of blanks: too few tokens, tokenized whole
        "\u0301" * (cut_at + 5) + " after",  # combining marks the normalizer drops
        "日本語" * 2_000 + " end",  # no ASCII blank for a long way
    ]
    return made


def byte_level_bpe() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(texts(1), trainers.BpeTrainer(vocab_size=400, show_progress=False))
    return tokenizer


def metaspace_unigram() -> Tokenizer:
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.train_from_iterator(
        texts(2), trainers.UnigramTrainer(vocab_size=300, show_progress=False, unk_token="<unk>")
    )
    return tokenizer


def no_word_split() -> Tokenizer:
    """A pre-tokenizer that keeps blanks inside pieces: a cut at a word end could change them."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Split(pattern="|", behavior="isolated")
    tokenizer.train_from_iterator(texts(3), trainers.BpeTrainer(vocab_size=300, show_progress=False))
    return tokenizer


def check_same_as_whole(tokenizer: Tokenizer, reference: Tokenizer | Path, seed: int) -> Recording:
    recording = Recording(tokenizer)
    tokenize = tokenize_with(recording, MAX_LENGTH)
    batch = texts(seed)
    ids, mask = tokenize(batch, MAX_LENGTH)
    for row, text in enumerate(batch):
        expected = whole_ids(reference, text)
        got = ids[row][mask[row] == 1].tolist()
        assert got == expected, f"text {row} ({text[:40]!r}...): {got[-5:]} != {expected[-5:]}"
        assert np.all(ids[row][mask[row] == 0] == 0)
    return recording


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_minilm_ids_of_long_texts_are_those_of_the_whole_texts(seed: int) -> None:
    path = minilm_dir() / "tokenizer.json"
    recording = check_same_as_whole(Tokenizer.from_file(str(path)), path, seed)
    batch = texts(seed)
    # The prefix was taken: the 15,000-character text of words was encoded as its first few kilobytes.
    words_row = batch.index("word " * 3000)
    assert len(recording.encoded[words_row]) < 3 * MAX_LENGTH * PREFIX_CHARS_PER_TOKEN
    # Texts whose prefix was too short were then encoded whole.
    assert sum(len(text) == 50_000 for text in recording.encoded) == 1


@pytest.mark.parametrize("make", [byte_level_bpe, metaspace_unigram], ids=["byte-level-bpe", "metaspace-unigram"])
def test_other_word_splitting_tokenizers_give_the_whole_texts_ids(make: Any) -> None:
    tokenizer = make()
    reference = Tokenizer.from_str(tokenizer.to_str())
    recording = check_same_as_whole(tokenizer, reference, 21)
    assert min(map(len, recording.encoded)) < len("word " * 3000), "no text was cut: the check proved nothing"


def test_a_tokenizer_that_does_not_split_at_blanks_gets_every_text_whole() -> None:
    tokenizer = no_word_split()
    reference = Tokenizer.from_str(tokenizer.to_str())
    recording = check_same_as_whole(tokenizer, reference, 31)
    assert recording.encoded == texts(31)


def test_a_tokenizer_without_a_pre_tokenizer_gets_every_text_whole() -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.train_from_iterator(["ab cd ef"], trainers.BpeTrainer(vocab_size=50, show_progress=False))
    recording = Recording(tokenizer)
    long_text = "ab cd " * 2_000
    tokenize_with(recording, MAX_LENGTH)([long_text], MAX_LENGTH)
    assert recording.encoded == [long_text]


def test_the_cut_keeps_the_word_it_falls_in_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2 characters per token: the prefix's length, 256, falls inside "elephant", whose whole word is
    # the 126th token kept; cut there, its first piece would be "el".
    monkeypatch.setattr("neuronserve.protocol.PREFIX_CHARS_PER_TOKEN", 2)
    path = minilm_dir() / "tokenizer.json"
    text = "a " * 125 + "elephant" + " b" * 200
    recording = Recording(Tokenizer.from_file(str(path)))
    ids, _ = tokenize_with(recording, MAX_LENGTH)([text], MAX_LENGTH)
    assert recording.encoded == [text[: text.index("elephant") + len("elephant")]]
    assert ids[0].tolist() == whole_ids(path, text)
    assert whole_ids(path, text[:256]) != whole_ids(path, text), "a cut inside the word changes nothing"
