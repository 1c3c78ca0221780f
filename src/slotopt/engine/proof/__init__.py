"""Everything a step (or a ``set_weights``, a load) proves before its first write: one half of the step's safety;
``engine/writing/`` is the other (what runs once writing starts). A check that fails here changes nothing.

* ``validation``: every gradient converted and checked against its variable (``checked_pairs``: an ordinary step of
  the last step's plan in one pass, engine/plan.py);
* ``unchanged``: the variables and slots still of the kind the optimizer built them for, none a kernel may not write,
  and the whole step proven again just before its first write (``proven_again``), after the code the step itself
  calls;
* ``aliasing``: a gradient that is (or overlaps) its variable's memory, copied or refused then;
* ``weights``: values given for the optimizer's own tensors (``set_weights``, ``load_own_variables``,
  ``stateless_apply``, a reader's state) converted and checked against their targets before any is assigned.

Hyperparameters are checked with the hyperparameters (``engine/checks.py``).
"""
