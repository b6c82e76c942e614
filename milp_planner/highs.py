"""HiGHS settings every mixed-integer model of the project shares (the rounds' MILPs, the
Pareto front's lexicographic steps, the flow MIP floor).

HiGHS 1.14's presolve reduced a 7-arc model to empty and called a plan of 310 bytes optimal
where one of 256 met every cap (a memory ε-step of a random front of the differential bed,
``tests/differential_corpus/random-10439.json``). Switching off its aggregator (rule bit 12)
or its parallel rows and columns (bit 13) gives the right answer; both stay off. A MIP whose
answer is a proof cannot afford a reduction known to be wrong.
"""

PRESOLVE_RULES_OFF = (1 << 12) | (1 << 13)
