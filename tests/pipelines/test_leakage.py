"""The export leakage check's computation (pipelines.export.leakage.find_leaks), from its rule: a
leaking image is byte-identical to a reference (the same image, or another file), or its
nearest reference by features is at least the threshold similar and passes the pixel check;
an image without features is named as unchecked."""
import numpy as np

from pipelines.export.leakage import Entry, find_leaks


def test_find_leaks_names_identical_files_near_duplicates_and_unchecked_images():
    rng = np.random.default_rng(1)
    basis = np.linalg.qr(rng.normal(size=(16, 16)))[0]
    item_x = np.stack([basis[0], basis[1], basis[2] + 0.02 * basis[3]]).astype(np.float32)
    ref_x = np.stack([basis[5], basis[2], basis[1] + 0.02 * basis[4]]).astype(np.float32)
    items = [Entry(1, "pool:a.jpg", "SHA-A", 0), Entry(2, "pool:b.jpg", "SHA-B", 1), Entry(3, "pool:c.jpg", "SHA-C", 2),
             Entry(4, "pool:d.jpg", "SHA-REF9", None), Entry(5, "pool:e.jpg", "SHA-E", None)]
    refs = [Entry(9, "ids:x.jpg", "SHA-REF9", 0, against="id_reference"), Entry(3, "pool:c.jpg", "SHA-C", 1, against="export old-v1"),
            Entry(7, "ids:y.jpg", "SHA-Y", 2, against="id_reference")]
    pixel_ok = {(2, 7)}  # the pixel check passes only for item 2 against reference 7
    out = find_leaks(items, refs, item_x=item_x, ref_x=ref_x, threshold=0.9, model_name="m",
                     looks_same=lambda it, ref: (it.image_id, ref.image_id) in pixel_ok)
    by = {(v["image"], v["kind"]): v for v in out}
    assert by[(3, "same_image")]["against"] == "export old-v1"  # already exported in another split
    assert by[(4, "identical_file")]["with"] == "ids:x.jpg" and by[(4, "identical_file")]["similarity"] == 1.0
    assert by[(2, "near_duplicate")]["with"] == "ids:y.jpg" and by[(2, "near_duplicate")]["similarity"] > 0.99
    assert (1, "near_duplicate") not in by  # far from every reference
    assert set(by) == {(3, "same_image"), (4, "identical_file"), (2, "near_duplicate"), (4, "no_features"), (5, "no_features")}
    assert out[-1]["kind"] == "no_features" and "run the image pipeline with m" in out[-1]["against"]
