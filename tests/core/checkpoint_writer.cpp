// Saves checkpoints of a ~32 MB model to one path, over and over, until killed: the subject of
// the test that kills it with SIGKILL in the middle of a save.
//   checkpoint_writer <path>
#include <arc/core/checkpoint.h>

#include <torch/torch.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: checkpoint_writer <path>" << std::endl;
    return 2;
  }
  torch::nn::Linear model(2048, 4096);
  for (int64_t generation = 0;; ++generation) {
    {
      torch::NoGradGuard no_grad;
      model->weight.fill_(static_cast<float>(generation));
    }
    arc::CheckpointWriter writer(nlohmann::json{{"generation", generation}});
    writer.add_module(*model);
    writer.write(argv[1]);
  }
}
