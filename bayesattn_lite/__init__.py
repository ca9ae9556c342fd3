"""bayesattn_lite: the helper package of the course "How gradient descent shapes attention".

Every chapter imports it instead of pasting code. One idea per module, in three tiers that import
only downward (CONTRIBUTING.md draws them):

concepts, with no chapter and no figure in them:
- ``attention``   the single head of the paper, its closed-form gradients, the score-space kernel
- ``gradcheck``   autograd and finite-difference references to check those formulas against
- ``tasks``       tasks with an exact posterior (sticky Markov chain, hidden sources): sample + posterior
- ``wind_tunnels`` Paper I's three wind tunnels
- ``models``      Transformer, Mamba-style SSM, LSTM and MLP behind one interface, one size rule
- ``train``       the one training loop: devices, seeds, parameter groups, the EM-like schedule
- ``batched``     many single heads trained as one computation (closed form)
- ``checkpoints`` what both loops share: checkpoints that name their run, progress, Ctrl-C
- ``threads``     the CPU thread count of ``batched``'s loop, chosen by timing its steps (a busy machine)
- ``diagnostics`` the one entropy and KL, change rates, PCA, error in bits, Paper I's geometry
- ``em``          EM for a Gaussian mixture, beside the head (chapter 5)
- ``monitor``     records alpha, u, b and the advantage of a model during training (chapter 9)

chapter experiments, which compute and return results:
- ``specialisation`` (chapters 4-5), ``experiments`` (chapter 6), ``comparison``, ``converged`` (the
  shipped converged models) and ``distributed`` (chapters 7-9, on the wind tunnels; DDP under
  torchrun), ``dynamics`` (frame and precision inside a wind-tunnel transformer while it trains, chapter 9)

presentation and teaching:
- ``plots``, ``widgets``  figures and interactive panels used by the chapters
- ``checks``      the exercise checks (the learner's side)

the instructor's side, in its own subpackage ``instructor`` that nothing above imports:
- ``instructor.assignments``  the problem sets and their student versions
- ``instructor.grading``      the autograder, which runs each submission in ``instructor._sandbox``

"""

__version__ = "0.1.0"

# Where the course lives. The notebooks' install cells and _config.yml name the same
# repository and version; tests/test_notebooks.py keeps them in step.
REPOSITORY_URL = "https://github.com/bayesattn-course/bayesattn-lite"
