// The Java side of tests/client/java-stream.sh: RabbitMQ's Java stream
// client writes sub-entry batches with every codec for warren-client to
// read, and reads the ones warren-client wrote.
//
//   java StreamInterop publish URI PREFIX COUNT   one stream PREFIX-CODEC per codec,
//                                                 COUNT messages "java-I", 10 to a sub-entry
//   java StreamInterop consume URI PREFIX COUNT   reads PREFIX-CODEC for each codec and
//                                                 checks "rust-0" .. "rust-(COUNT-1)" in order
//
// Every connection goes to the URI's address (the anchor advertises its
// host name). Exits 1 with a message if anything is missing or out of order.

import com.rabbitmq.stream.Address;
import com.rabbitmq.stream.Consumer;
import com.rabbitmq.stream.Environment;
import com.rabbitmq.stream.OffsetSpecification;
import com.rabbitmq.stream.Producer;
import com.rabbitmq.stream.compression.Compression;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

public class StreamInterop {

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    String uri = args[1];
    String prefix = args[2];
    int count = Integer.parseInt(args[3]);
    URI u = new URI(uri);
    Address address = new Address(u.getHost(), u.getPort());
    try (Environment env = Environment.builder().uri(uri).addressResolver(a -> address).build()) {
      List<String> failures = new ArrayList<>();
      for (Compression c : Compression.values()) {
        String stream = prefix + "-" + c.name().toLowerCase();
        String failure = mode.equals("publish") ? publish(env, stream, c, count) : consume(env, stream, count);
        if (failure != null) {
          failures.add(stream + ": " + failure);
        } else {
          System.out.println(mode + " " + stream + ": " + count + " messages");
        }
      }
      if (!failures.isEmpty()) {
        failures.forEach(System.err::println);
        System.exit(1);
      }
    }
  }

  static String publish(Environment env, String stream, Compression c, int count) throws Exception {
    env.streamCreator().stream(stream).create();
    Producer producer = env.producerBuilder().stream(stream).subEntrySize(10).compression(c).build();
    CountDownLatch confirmed = new CountDownLatch(count);
    AtomicInteger refused = new AtomicInteger();
    for (int i = 0; i < count; i++) {
      byte[] body = ("java-" + i).getBytes(StandardCharsets.UTF_8);
      producer.send(
          producer.messageBuilder().addData(body).build(),
          status -> {
            if (!status.isConfirmed()) {
              refused.incrementAndGet();
            }
            confirmed.countDown();
          });
    }
    if (!confirmed.await(60, TimeUnit.SECONDS)) {
      return "not every publish confirmed in 60 s";
    }
    producer.close();
    return refused.get() == 0 ? null : refused.get() + " publishes refused";
  }

  static String consume(Environment env, String stream, int count) throws Exception {
    CountDownLatch all = new CountDownLatch(count);
    AtomicInteger next = new AtomicInteger();
    List<String> wrong = new ArrayList<>();
    Consumer consumer =
        env.consumerBuilder()
            .stream(stream)
            .offset(OffsetSpecification.first())
            .messageHandler(
                (context, message) -> {
                  int i = next.getAndIncrement();
                  String body = new String(message.getBodyAsBinary(), StandardCharsets.UTF_8);
                  if (!body.equals("rust-" + i)) {
                    synchronized (wrong) {
                      if (wrong.size() < 5) {
                        wrong.add("message " + i + " is '" + body + "'");
                      }
                    }
                  }
                  all.countDown();
                })
            .build();
    boolean done = all.await(60, TimeUnit.SECONDS);
    consumer.close();
    if (!wrong.isEmpty()) {
      return String.join("; ", wrong);
    }
    return done ? null : "only " + next.get() + " of " + count + " messages in 60 s";
  }
}
