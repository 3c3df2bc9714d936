"""``ltsedge proxy-check``: does the decoder-parameter count rank held-out loss on the user's own text, for
the user's own space?

The search trusts one proxy: more decoder parameters, lower perplexity. The study measured it on fully
trained GPT-2 and Transformer-XL models on WikiText-103 and LM1B; nobody measured it for PAR block types,
for other families or for a user's own text. The check samples architectures of the space spread over
their decoder-parameter range, trains each with one recipe on the user's text and ranks the counts
against the held-out loss.

    sampling.py    which models: a spread sample, a standard GPT-2 control, an equal-parameter depth set
    text.py        the user's text (a file or a folder), refused in one line when empty or binary
    tokens.py      the tokenizer (given, or a byte-level BPE trained on the text) and the held-out chunks
    training.py    the recipe (AdamW, warmup, cosine) and the training of one model
    workers.py     several models at once, each in a process of its own (sharing a GPU)
    stats.py       Spearman with bootstrap intervals, fitted proxies with their leave-one-out error
    report.py      the JSON, the PNG and the lines printed
    progress.py    the live bars (rich)
    run.py         the plan and the whole run
    models_log.py  the resumable log (one JSON line per model), each line checked when read back
    trainer.py     the planned models trained, one at a time or several at once, each logged as it ends
    fitted.py      a check's result read back: the search's ``--proxy FILE`` and the search report's section

Only ``run``, ``trainer``, ``training``, ``workers`` and ``models_log`` (counting a model's attention) import
torch; ``fitted`` imports nothing heavy (a report is drawn anywhere).
"""

RESULT = "proxy-check.json"  # the summary; a search's report shows it when found in the search's folder
PICTURE = "proxy-check.png"
