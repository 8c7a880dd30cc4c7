"""gputext's benchmarks: one registry of entries (family x dataset x peer), one datagen, one runner,
and the records every published figure is rendered from.

  registry.py  the entries and the family scripts they use (what is measured, on what, against whom)
  datagen.py   the datasets, built once with the gputext command line (`corpus build`, `corpus synth`)
  fresh.py     fresh-process timing from outside: wall and user+sys CPU, cold and warm kernel cache
  library.py   the in-process library calls (warm, median)
  adapters.py  figures out of the family scripts' JSON reports
  records.py   the record schema (one JSON line per measurement, benchmarks/records/*.jsonl)
  run.py       the runner: python -m benchmarks.run --suite readme
  render.py    the tables of README.md, docs/*.md and benchmarks/RESULTS.md, from the records:
               python -m benchmarks.render (--check: fail when a table is out of date)
"""
