"""The claims guides and threads make about MPS speed, and the measurement that tests each.

README.md's "The guides' claims, measured" table holds the same rows (a test
keeps them in step); the site's /-/claims page shows each beside what the
database holds for it. In a command, DEVICE stands for mps or cuda: the same
command measures either.
"""

CLAIMS = (
    {"id": "resnet50-inference",
     "claim": "MPS runs ResNet-50 inference 3-5x faster than the CPU (M1 Max); 1.8-4.6x by batch size (M1 Air)",
     "measure": "whole-model inference step per batch size, CPU (all threads) against the target",
     "command": "mpsprobe check benchmarks/models/resnet50.py --run --device DEVICE "
                "--batch 1,2,4,8,16,32,64 --db speed.db",
     "model": "resnet50", "mode": "inference"},
    {"id": "mnist-training",
     "claim": "MNIST-scale training is about 6x faster on MPS (some 2022 nightlies: slower)",
     "measure": "whole-model training step (forward, backward, SGD) of pytorch/examples' MNIST network "
                "per batch size",
     "command": "mpsprobe check benchmarks/models/mnist_cnn.py --run --train --device DEVICE "
                "--batch 1,8,32,64,128,256 --db speed.db",
     "model": "mnist_cnn", "mode": "training"},
    {"id": "small-batch-crossover",
     "claim": "Batches under 8-16 lose to the CPU",
     "measure": "crossover batch of a BERT-base-shaped encoder (and of ResNet-50 above, and of the layer "
                "ladders at ResNet-50, BERT-base and ViT-B/16 shapes)",
     "command": "mpsprobe check benchmarks/models/bert_base.py --run --device DEVICE --batch 1,2,4,8,16,32,64 "
                "--db speed.db; mpsprobe bench --families conv,linear,attention,norm --device DEVICE --db speed.db",
     "model": "bert_base", "mode": "inference"},
    {"id": "batchnorm3d",
     "claim": "BatchNorm3d is slow on MPS: 0.77x the CPU in a 3-D ResNet (pytorch#178492)",
     "measure": "speed ladder of r3d_18.bn (BatchNorm3d at R3D-18's stem shape), forward and backward",
     "command": "mpsprobe bench --ops r3d_18.bn,r3d_18.stem,r3d_18.layer1.conv --device DEVICE --db speed.db",
     "op": "r3d_18.bn"},
    {"id": "fft",
     "claim": "FFTs are fast on MPS (or fall back to the CPU)",
     "measure": "speed ladders of fft.rfft and fft.fft2; the op sweep's fallback status for fft ops",
     "command": "mpsprobe bench --families fft --device DEVICE --db speed.db; "
                "mpsprobe run --ops 'fft.*' --device DEVICE --db speed.db",
     "op": "fft.rfft"},
    {"id": "float64",
     "claim": "MPS has no float64",
     "measure": "the op sweep's float64 statuses (unsupported on MPS), and a float64 ladder elsewhere",
     "command": "mpsprobe run --dtypes float64 --device DEVICE --db speed.db; "
                "mpsprobe bench --ops add,matmul --dtype float64 --device DEVICE --db speed.db",
     "op": "matmul", "dtype": "float64"},
)
