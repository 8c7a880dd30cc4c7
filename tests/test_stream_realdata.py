"""Stream clustering of real news (Reuters R8, tf-icf as `corpus build --weighting tficf`): the CPU
backends equal the sequential float64 reference document by document."""
import numpy as np
import pytest

from gputext.cluster.stream import StreamClusterer
from gputext.cluster.stream_reference import reference_cluster

pytestmark = pytest.mark.realdata


@pytest.fixture(scope="module")
def r8(shared_datasets):
    from gputext.io.ingest import build_corpus
    return build_corpus([str(shared_datasets / "reuters-r8" / "reuters-r8-test.tab")], weighting="tficf")


@pytest.mark.parametrize("threshold", [0.25, 0.6])
def test_reuters_r8_stream_equals_reference(r8, threshold):
    X = r8.X[:1000]
    cluster, sims, new, ref = reference_cluster(X, threshold, 35)
    assert 10 < ref.n_clusters < 1000
    for batch_size, candidates in ((1, "index"), (16, "auto"), (64, "scan")):
        r = StreamClusterer(threshold, 35, device="cpu", batch_size=batch_size, candidates=candidates).partial_fit(X)
        np.testing.assert_array_equal(r.cluster, cluster)
        np.testing.assert_array_equal(r.similarity, sims)
