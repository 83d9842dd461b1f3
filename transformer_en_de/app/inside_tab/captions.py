"""The words beside the Inside tab's pictures: each picture's line from the paper, and the attention kinds' titles."""

# One line per picture: what the paper says it is, in a visitor's words.
CAPTIONS = {
    "pieces": "Section 3.4: the model reads and writes BPE pieces, each an id in one vocabulary; one learned embedding "
    "matrix turns each id into a vector (ours shares it between English, German and the output layer).",
    "positions": "Section 3.5: attention alone does not see word order, so a fixed pattern of sines and cosines, one "
    "wavelength per dimension, is added to the vector of each position. Section 3.4: the embedding is first multiplied "
    "by √d_model; the bars compare the size of the two parts.",
    "encoder_self": "Section 3.2.3: in the encoder every English piece reads every English piece (self-attention); "
    "section 3.2.1: each column is a softmax over the pieces it reads, so it sums to 1.",
    "decoder_self": "Section 3.2.3: in the decoder each German piece reads only itself and the pieces before it (the "
    "mask sets the later ones to zero: the empty triangle), so it cannot look at words not yet written.",
    "cross": "Section 3.2.3: encoder-decoder attention: each German piece (queries) reads the English pieces (keys and "
    "values from the encoder's output); section 3.2.1: softmax(QKᵀ/√d_k), one column per German piece.",
    "heads": "Section 3.2.2: h heads attend side by side, each with its own projections, and often look at different "
    "things.",
    "beams": "Section 6.1: the paper decodes with beam search (4 beams, length penalty α = 0.6): at each step only the "
    "best few partial translations live on (one table: a row per step, a column per beam, best first); a finished one "
    "is scored by its log-probability divided by (its length)^α, so a higher α favours longer translations (the "
    "second table ranks them).",
}
KIND_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention (masked)",
    "cross": "cross-attention",
}

__all__ = ["CAPTIONS", "KIND_TITLES"]
