"""WordNet provisioning and ImageNet class lists (real files, no database)."""

import pytest

from pipelines.classes import imagenet
from pipelines.classes.wordnet import LEXNAMES, WordNetUnavailable, load_wordnet, provision_wordnet, synset_info


def test_provisioning_from_debian_files_gives_wordnet_30(tmp_path):
    line = provision_wordnet(tmp_path / "nltk_data", allow_download=False)
    assert "WordNet 3.0" in line and "dog.n.01" in line
    wn = load_wordnet(tmp_path / "nltk_data")
    assert synset_info(wn, "n02123159").name == "tiger_cat.n.02"
    assert synset_info(wn, "n99999999") is None
    assert len(LEXNAMES) == 45
    lex = (tmp_path / "nltk_data" / "corpora" / "wordnet" / "lexnames").read_text().splitlines()
    assert lex[5] == "05\tnoun.animal\t1" and lex[44] == "44\tadj.ppl\t3"
    # copies, not links: NLTK >= 3.10 refuses files resolving outside its data path
    assert not (tmp_path / "nltk_data" / "corpora" / "wordnet" / "data.noun").is_symlink()


def test_missing_wordnet_is_an_explicit_error_with_the_fix(tmp_path):
    with pytest.raises(WordNetUnavailable, match="setup_wordnet"):
        load_wordnet(tmp_path / "empty")
    with pytest.raises(WordNetUnavailable, match="apt-get install wordnet-base wordnet-sense-index"):
        provision_wordnet(tmp_path / "x", debian_dir=tmp_path / "nothing", allow_download=False)


def test_timm_class_lists_have_the_published_sizes():
    sizes = {name: len(imagenet.named_list(name)) for name in imagenet.NAMED_LISTS}
    assert sizes == {"imagenet-1k": 1000, "imagenet-21k": 21843, "imagenet-21k-p": 11221,
                     "imagenet-21k-p-winter21": 10450, "imagenet-12k": 11821}
    assert imagenet.named_list("imagenet-1k")[0] == "n01440764"  # tench


def test_wnid_files_are_validated_line_by_line(tmp_path):
    f = tmp_path / "ids.txt"
    f.write_text("# my classes\nn02084071\n\nn02123159  tiger cat\n", encoding="utf-8")
    assert imagenet.resolve_class_list(str(f)) == ("n02084071", "n02123159")
    f.write_text("n02084071\ndog\n", encoding="utf-8")
    with pytest.raises(imagenet.ClassListError, match=r"ids.txt, line 2: 'dog' is not a WordNet noun id"):
        imagenet.read_wnid_file(f)
    f.write_text("n02084071\nn02084071\n", encoding="utf-8")
    with pytest.raises(imagenet.ClassListError, match="line 2: n02084071 repeats line 1"):
        imagenet.read_wnid_file(f)
    with pytest.raises(imagenet.ClassListError, match="unknown class list"):
        imagenet.resolve_class_list("imagenet-2k")
