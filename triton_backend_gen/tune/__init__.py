"""`tbgen tune`'s decisions and files: the configuration space of a model (``space``), where to measure next
and what to recommend (``search``), results.jsonl (``results``) and the tuned config.pbtxt (``config_file``).
commands.tune runs them against a real server."""
