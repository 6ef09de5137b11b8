"""The studies: the detour paper's (``budget_study``) and the second paper's (``hybrid``), each a sweep of runs
fine-tuned on a task suite, run, stopped and resumed one way (``study_run``), with their reports."""
