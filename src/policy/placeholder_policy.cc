// placeholder until this stage lands; removed by its first real source
namespace soyaos { [[maybe_unused]] static int placeholder_policy; }
