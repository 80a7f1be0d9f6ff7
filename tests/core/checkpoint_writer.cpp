// Saves checkpoints of a ~32 MB model to one path, over and over, until killed: the subject of
// the tests that kill it with SIGKILL in the middle of a save. With --async, each save goes to an
// AsyncCheckpointWriter, and the weights are overwritten with -1 while the background write runs.
//   checkpoint_writer <path> [--async]
#include <arc/fabric/async_checkpoint_writer.h>
#include <arc/fabric/checkpoint.h>

#include <torch/torch.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  const bool async = argc == 3 && std::string(argv[2]) == "--async";
  if (argc != 2 && !async) {
    std::cerr << "usage: checkpoint_writer <path> [--async]" << std::endl;
    return 2;
  }
  torch::NoGradGuard no_grad;
  torch::nn::Linear model(2048, 4096);
  arc::AsyncCheckpointWriter background;
  for (int64_t generation = 0;; ++generation) {
    model->weight.fill_(static_cast<float>(generation));
    arc::CheckpointWriter writer(nlohmann::json{{"generation", generation}});
    writer.add_module(*model);
    if (!async) {
      writer.write(argv[1]);
      continue;
    }
    background.save(std::move(writer), argv[1]);
    model->weight.fill_(-1.0f);
  }
}
