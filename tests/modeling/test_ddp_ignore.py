from torch import nn

from dit_lora.modeling.ddp_ignore import ATTRIBUTE, ignore_in_ddp


def test_names_are_added_to_what_is_already_ignored():
    model = nn.Linear(2, 2)
    ignore_in_ddp(model, [])
    assert not hasattr(model, ATTRIBUTE)  # nothing to ignore: no attribute at all
    ignore_in_ddp(model, ["weight"])
    ignore_in_ddp(model, ["bias", "weight"])  # a second lever keeps the first one's names
    assert getattr(model, ATTRIBUTE) == ["bias", "weight"]


def test_ddp_reads_the_list_it_is_given():
    # the attribute name is torch's own: DistributedDataParallel reads it when it wraps the module
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    assert ATTRIBUTE in inspect.getsource(DistributedDataParallel)
