"""What runs once a step (or a build, a ``set_weights``, a composite's dispatch) starts writing: the other half of
the step's safety, after ``engine/proof/`` proved everything that could fail.

* ``atomic``: the hold: from the first write to the last, no finalizer, weakref callback of a collected cycle or
  SIGINT handler runs (``hold``/``release``), and the marks an outer step leaves for the steps it runs
  (``outer_step``, ``StepGuard``, ``KeptValues``);
* ``undo``: the values a step that may still fail after its first write keeps (a constraint, a write that runs
  code not slotopt's), and puts back when it does (``StepValues``, ``constrained_step``);
* ``transaction``: ``snapshot``/``restore`` of an optimizer's bookkeeping (which variables and slots exist,
  pending checkpoints) and ``copy_values``/``put_values`` of tensors' values.

Nothing here checks an input: a check belongs before the first write (``engine/proof/``), a hyperparameter's with
the hyperparameters (``engine/checks.py``).
"""
