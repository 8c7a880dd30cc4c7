"""Linear models trained on the GPU (or the CPU twin) by gputext's TRON: the one-vs-rest L2-loss
SVM (LIBLINEAR -s 2). gputext.linear.solver holds the entry point (train_path), gputext.linear.ops
and cuda_ops the backend operations, gputext.kernels.linear_svm the kernels;
gputext.LinearSVC (gputext/estimators/svm.py) is scikit-learn's interface to it."""
