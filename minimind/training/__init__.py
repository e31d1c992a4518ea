"""How the book's models were trained: the poetry corpus, the BPE tokenizer, the training loop, evaluation."""
