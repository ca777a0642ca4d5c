"""``neuronfleet demo``: the one-command tour of the operator on the local sandbox, split by concern.

- :mod:`~neuronfleet.demo.options`: options, constants, the default trace (shipped as package data);
- :mod:`~neuronfleet.demo.orchestration`: cluster, operator, example, compile, then the load;
- :mod:`~neuronfleet.demo.pacing`: compressed time held to ``--speed`` for the simulated replay;
- :mod:`~neuronfleet.demo.recording`: what is measured (fleet, timeline, the operator's Events);
- :mod:`~neuronfleet.demo.terminal`: the live view and progress lines;
- :mod:`~neuronfleet.demo.report`: the summary and report.md, timeline.png, summary.json;
- :mod:`~neuronfleet.demo.cli`: the command line.
"""
