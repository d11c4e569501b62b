from gpuslice.common.images import (
    LABEL_APPS,
    LABEL_FRAMEWORKS,
    LABEL_GPU,
    LABEL_MIN_GPU,
    LABEL_MIN_MEM,
    ImageApp,
    ImageMeta,
)


def test_labels_round_trip():
    meta = ImageMeta(
        title="scikit-learn 1.5", frameworks={"python": "3.11", "scikit-learn": "1.5.2"},
        min_gpu=500, min_cpu=1500, min_mem=2 * 1024**3, gpu=True,
        apps=(ImageApp("jupyter", "http", 8888),), owner="alice", origin_session="s-1",
    )
    assert ImageMeta.from_labels(meta.to_labels()) == meta


def test_an_image_without_labels_is_a_plain_image():
    assert ImageMeta.from_labels(None) == ImageMeta()
    assert ImageMeta.from_labels({"maintainer": "x"}) == ImageMeta()


def test_malformed_labels_are_ignored_and_named():
    meta = ImageMeta.from_labels({
        LABEL_MIN_GPU: "lots", LABEL_MIN_MEM: "2g", LABEL_FRAMEWORKS: "[1]",
        LABEL_APPS: '[{"name": "jupyter", "protocol": "http", "port": 8888}, '
                    '{"name": "x", "protocol": "smtp", "port": 25}]',
        LABEL_GPU: "TRUE",
    })
    assert meta.min_gpu == 0 and meta.min_mem == 2 * 1024**3 and meta.gpu
    assert meta.frameworks == {}
    assert meta.apps == (ImageApp("jupyter", "http", 8888),)
    assert len(meta.problems) == 3
