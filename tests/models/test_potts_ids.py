"""Token ids of the Potts models (models/potts_ids.py): one range check per forward, one host transfer."""

import pytest
import torch

from energyformer.models.potts_ids import check_colour_ids


def test_ids_in_range_pass_and_out_of_range_name_the_range_found():
    check_colour_ids(torch.tensor([[0, 3, 4]]), 4)        # 4 = the mask
    check_colour_ids(torch.zeros(0, 5, dtype=torch.long), 4)
    for bad, found in ((torch.tensor([[0, 5]]), "[0, 5]"), (torch.tensor([[-1, 2]]), "[-1, 2]")):
        with pytest.raises(ValueError, match=rf"token ids in \{found}; allowed 0..3 \(colours\) and 4 \(mask\)"):
            check_colour_ids(bad, 4)
